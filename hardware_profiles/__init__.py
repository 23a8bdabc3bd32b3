"""Datasheet hardware profiles, one TOML file per accelerator (read by ``roofline.costing.hardware``)."""
