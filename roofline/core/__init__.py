"""The foundation every layer uses: the one error type, validation, units, JSON, interrupts."""
