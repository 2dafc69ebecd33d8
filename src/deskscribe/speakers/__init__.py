"""Who spoke when: speaker embeddings, clustering, diarization, names and voice profiles."""
