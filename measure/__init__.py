"""specroof's measurement half: real passes on the device found (torch; CUDA or CPU).

Imports ``roofline``; ``roofline`` never imports this package.
"""
