"""The parts of scripts/dev.py (the developer driver); its data is scripts/dev.toml."""
