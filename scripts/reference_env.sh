# Sourced (from the repository root) by scripts/pyannote_env.sh and bench/ct2_env.sh: a
# virtual environment of its own for a reference implementation on CPU torch, which the app
# and .venv never import.
#   env_ready ENV STAMP && exit 0    # ENV made with STAMP before: prints its python
#   env_create ENV TORCH SPEC...     # a fresh ENV, TORCH pinned, SPEC installed
#   env_done ENV STAMP               # records STAMP and prints ENV's python

env_ready() {
  local env="$1" stamp="$2"
  if [ -f "$env/.deskscribe-ready" ] && [ "$(cat "$env/.deskscribe-ready")" = "$stamp" ] \
    && [ -x "$env/bin/python" ]; then
    echo "$PWD/$env/bin/python"
    return 0
  fi
  return 1
}

env_create() {
  local env="$1" torch="$2" py=python3 constraints
  shift 2
  # The interpreter .venv was made from, when there is one (the same Python version).
  if [ -x .venv/bin/python ]; then
    py="$(.venv/bin/python -c 'import sys; print(sys._base_executable)')"
  fi
  rm -rf "$env"
  mkdir -p "$(dirname "$env")"
  "$py" -m venv "$env"
  constraints="$(mktemp)"
  echo "$torch" >"$constraints"
  # (this machine's pip config names local indexes that may not exist: their warnings dropped)
  "$env/bin/pip" install -q --disable-pip-version-check -c "$constraints" "$torch" "$@" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  rm -f "$constraints"
}

env_done() {
  echo "$2" >"$1/.deskscribe-ready"
  echo "$PWD/$1/bin/python"
}
