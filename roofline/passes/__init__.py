"""What a pass is: dtypes and weight formats, model shapes, FLOPs and bytes per operator."""
