"""An SGLang-API emulator: a real HTTP server backed by a calibrated performance model.

Everything it serves is simulated and labelled so (``"emulated": true`` in
/server_info, the ``X-Findings-Emulated: 1`` header, the model name
``findings-emulator/<profile>``). See docs/emulator.md.

Importing this package imports nothing heavy: aiohttp is imported by
``findings.emulator.server`` only, when that module is imported.
"""
