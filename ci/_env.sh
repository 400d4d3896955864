# Shared by ci/build and ci/test: find the repository and make (or reuse) its virtual environment.
# The environment lives in .venv (override with BOOK_VENV). It is rebuilt only when
# requirements.txt or pyproject.toml change, so a second run starts in seconds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${BOOK_VENV:-$ROOT/.venv}"
PY_BOOT="${PYTHON:-python3}"

ensure_env() {
  local want stamp extra=()
  # BOOK_NO_INSTALL=1: use the python3 on PATH as it is (a machine without registry access, with
  # the packages provided another way). Nothing is installed or checked.
  if [[ "${BOOK_NO_INSTALL:-0}" == 1 ]]; then
    echo "[env] BOOK_NO_INSTALL=1: using $(command -v python3) as it is"
    mkdir -p "$ROOT/.out/bin"; ln -sf "$(command -v python3)" "$ROOT/.out/bin/python"; export PATH="$ROOT/.out/bin:$PATH"
    export PYTHONHASHSEED=0 PYDEVD_DISABLE_FILE_VALIDATION=1 TF_CPP_MIN_LOG_LEVEL=2
    return
  fi
  # BOOK_EXTRA_REQUIREMENTS: another pinned file installed on top (./ci/test --gpu uses ci/requirements-gpu.txt)
  [[ -n "${BOOK_EXTRA_REQUIREMENTS:-}" ]] && extra=(-r "$BOOK_EXTRA_REQUIREMENTS")
  want="$(cat requirements.txt pyproject.toml ${BOOK_EXTRA_REQUIREMENTS:-} | sha256sum | cut -c1-16)"
  stamp="$VENV/.book-stamp"
  if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "[env] reusing $(realpath --relative-to="$ROOT" "$VENV" 2>/dev/null || echo "$VENV") (requirements unchanged)"
  else
    "$PY_BOOT" - <<'PY' || { echo "[env] Python 3.11 or newer is required" >&2; exit 1; }
import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY
    echo "[env] creating the virtual environment and installing the pinned requirements"
    local t0=$SECONDS
    "$PY_BOOT" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v "is ignored" || true
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt "${extra[@]}" 2>&1 | grep -v "is ignored" || true
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . 2>&1 | grep -v "is ignored" || true
    "$VENV/bin/python" -c "import brainpy, jax, nbval, jupyter_book, shardbook" \
      || { echo "[env] installation failed: see the pip messages above" >&2; exit 1; }
    echo "$want" > "$stamp"
    echo "[env] installed in $((SECONDS - t0)) s"
  fi
  export PATH="$VENV/bin:$PATH"
  export PYTHONHASHSEED=0 PYDEVD_DISABLE_FILE_VALIDATION=1
  export TF_CPP_MIN_LOG_LEVEL=2
}

build_book() {
  python ci/record.py --ensure
  python ci/validation.py
  rm -rf _build/html
  jupyter-book build . --builder html -W -n --keep-going
  echo "[build] 0 warnings (Sphinx ran with -W -n: any warning fails the build)"
  echo "[build] open: $ROOT/_build/html/index.html"
}
