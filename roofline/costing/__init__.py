"""What a pass costs: hardware and engine profiles, the time model, pricing, pass time."""
