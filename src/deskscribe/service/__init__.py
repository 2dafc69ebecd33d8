"""The service layer: the work every front end asks for (no Qt, no HTTP).

The window (``gui/``), the terminal (``cli*.py``), the file queue's engine process (and next,
the team server) call this layer for work; it calls the domain packages (``whisper``, ``speakers``,
``audio``, ``models``, ``library``), which stand on ``transcript``, ``fsutil`` and ``errors``.
"""
