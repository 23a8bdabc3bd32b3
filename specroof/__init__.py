"""specroof's application layer: the command line and the report page.

It sits above both halves: ``roofline`` (numpy, the analytic model) and ``measure``
(torch, the harness). Imports point down only: ``roofline`` never imports ``measure``
or ``specroof``; ``measure`` never imports ``specroof``.
"""
