"""codes_bridge."""
