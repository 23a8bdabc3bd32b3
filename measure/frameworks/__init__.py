"""The frameworks ``specroof measure engine`` times: one module each (``hf``, ``torch_eager``, ``torch_compile``).

Each module has ``available()`` (None, or why it cannot run here), ``version()``, ``build(model, dtype,
device)`` (the harness's model in the framework's own format) and ``generate(model, prompts, n, assistant=,
gamma=, count=, clock=)`` returning a :class:`measure.frameworks.common.FrameworkRun`.
"""
