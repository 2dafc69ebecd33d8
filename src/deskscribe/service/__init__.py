"""The service layer: the work every front end asks for (no Qt, no HTTP).

The window (``gui/``), the terminal (``cli*.py``), the team server (``server/``, and its Ray
replicas) and the file queue's engine process call this layer for work: the file queue
(``file_queue``), watch folders (``watch``), file jobs (``files``), live sessions (``live``),
recovery after a crash (``recovery``), one way of saying every failure (``failures``). It
calls the domain packages (``whisper``, ``speakers``, ``audio``, ``models``, ``library``),
which stand on ``transcript``, ``fsutil`` and ``errors``.
"""
