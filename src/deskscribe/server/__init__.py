"""The team server: DeskScribe's engine behind OpenAI's audio API (``deskscribe serve``).

A third front end on the service layer, beside the window and the terminal. Needs the
``server`` extra (FastAPI, uvicorn, python-multipart, prometheus-client); nothing here is
imported unless ``deskscribe serve`` runs.

- ``config``: the server's settings and its API keys (stored hashed).
- ``state``: what one running server holds: models, the work pool, metrics, draining.
- ``errors``: every error in OpenAI's envelope.
- ``requests``: a transcription request's fields, checked, and the work itself.
- ``uploads``: the multipart form and its file, stored privately for the request.
- ``formats``: a transcript as each of OpenAI's response formats.
- ``app``: the FastAPI app and its REST routes.
- ``realtime_protocol`` / ``realtime``: the Realtime transcription WebSocket.
- ``jobs`` / ``job_store``: the job API for long files (persisted in SQLite).
- ``metrics``: the Prometheus figures.
- ``cluster``: the same app on Ray Serve (``--ray``; the ``cluster`` extra).
"""
