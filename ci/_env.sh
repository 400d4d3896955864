# shellcheck shell=bash
# Sourced by ci/build, ci/test, ci/regenerate and ci/browser: find the repository and make (or reuse) its virtual environment.
# The environment lives in .venv (override with BOOK_VENV). It is made again from empty
# only when requirements.txt or pyproject.toml change, so a second run starts in seconds;
# a package dropped from the pins (or ./ci/test --gpu's CUDA plugin) goes with it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${BOOK_VENV:-$ROOT/.venv}"
PY_BOOT="${PYTHON:-python3}"

# pip_step WHAT ARGS...: pip install ARGS into the venv; a failure stops the build and
# says which step failed (pip's own messages are shown). Only one line is dropped: the
# warning of a pip configuration that names a local index folder that does not exist.
pip_step() {
  local what="$1"; shift
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; } \
    || { echo "[env] pip failed while $what" >&2; exit 1; }
}

ensure_env() {
  local want stamp extra=()
  # BOOK_NO_INSTALL=1: use the python3 on PATH as it is (a machine without registry access, with
  # the packages provided another way). Nothing is installed or checked.
  if [[ "${BOOK_NO_INSTALL:-0}" == 1 ]]; then
    echo "[env] BOOK_NO_INSTALL=1: using $(command -v python3) as it is"
    # "python" runs that python3 by its own path (a symbolic link would hide a virtual
    # environment's python3 from its environment)
    mkdir -p "$ROOT/.out/bin"
    printf '#!/bin/sh\nexec %q "$@"\n' "$(command -v python3)" > "$ROOT/.out/bin/python"
    chmod +x "$ROOT/.out/bin/python"; export PATH="$ROOT/.out/bin:$PATH"
    export PYTHONHASHSEED=0 PYDEVD_DISABLE_FILE_VALIDATION=1 TF_CPP_MIN_LOG_LEVEL=2
    return
  fi
  # The venv's processes write a module's .pyc when they import one that has none
  # (two that import it at once both compile it; each write is atomic): see the
  # install below. BOOK_NO_INSTALL (above) leaves the variable as it is.
  unset PYTHONDONTWRITEBYTECODE
  # BOOK_EXTRA_REQUIREMENTS: another pinned file installed on top (./ci/test --gpu uses ci/requirements-gpu.txt)
  [[ -n "${BOOK_EXTRA_REQUIREMENTS:-}" ]] && extra=(-r "$BOOK_EXTRA_REQUIREMENTS")
  # the recipe's tag too: a .venv of an older recipe is made again, once
  want="$({ cat requirements.txt pyproject.toml ${BOOK_EXTRA_REQUIREMENTS:+"$BOOK_EXTRA_REQUIREMENTS"}; echo uv-lazy-bytecode; } | sha256sum | cut -c1-16)"
  stamp="$VENV/.book-stamp"
  if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "[env] reusing $(realpath --relative-to="$ROOT" "$VENV" 2>/dev/null || echo "$VENV") (requirements unchanged)"
  else
    "$PY_BOOT" - <<'PY' || { echo "[env] Python 3.11 or newer is required" >&2; exit 1; }
import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY
    echo "[env] creating the virtual environment and installing the pinned requirements"
    local t0=$SECONDS
    # --clear empties $VENV (installs only add packages): only a folder this script
    # made, which has its stamp from the first moment, or an empty or new one
    if [[ -d $VENV && ! -f $VENV/.book-stamp && -n "$(ls -A "$VENV")" ]]; then
      echo "[env] $VENV is not empty and was not made by ci/_env.sh (no .book-stamp):" \
        "remove it, or set BOOK_VENV to a new folder" >&2
      exit 1
    fi
    # the GPU-target wheels (ci/install_gpu_target) have pins and a stamp of their own
    local kept="$VENV.gpu-target-kept"
    if [[ -d $VENV/gpu-target ]]; then rm -rf "$kept"; mv "$VENV/gpu-target" "$kept"; fi
    "$PY_BOOT" -m venv --clear "$VENV"
    echo "incomplete" > "$stamp"
    if [[ -d $kept ]]; then mv "$kept" "$VENV/gpu-target"; fi
    # pip at its pin too (it installs uv and shardbook): a new pip release changes nothing
    local pip_pin
    pip_pin="$(grep -m1 '^pip==' requirements.txt)" \
      || { echo "[env] requirements.txt pins no pip: run ./ci/lock" >&2; exit 1; }
    pip_step "installing $pip_pin" "$pip_pin"
    # uv (pinned in requirements.txt) installs the same pins as pip, faster: it
    # downloads in parallel (pip took 100 s on a 2-core machine with an empty cache).
    # Where uv cannot be had, pip does it. No --compile-bytecode: it compiled every
    # module of every package, 18 s of the 2 cores before any test could start, most
    # of them never imported (22 s in all without it, on a warm uv cache). Python
    # writes the .pyc of what is imported instead: PYTHONDONTWRITEBYTECODE is unset
    # above, because with it set (as on some CI machines) and no .pyc, every
    # process compiled brainpy's imports from source again, 12.5 s against 4 s per
    # `import brainpy`. The import check below writes the first ones.
    local uv_pin
    uv_pin="$(grep -m1 '^uv==' requirements.txt || true)"
    if [[ -n "$uv_pin" ]] && "$VENV/bin/python" -m pip install -q \
        --disable-pip-version-check "$uv_pin" >/dev/null 2>&1 \
        && "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" \
          -r requirements.txt "${extra[@]}"; then
      echo "[env] installed requirements.txt${extra[*]:+ and $BOOK_EXTRA_REQUIREMENTS} with $uv_pin"
    else
      echo "[env] uv did not install the requirements; pip installs them"
      pip_step "installing requirements.txt${extra[*]:+ and $BOOK_EXTRA_REQUIREMENTS}" \
        -r requirements.txt "${extra[@]}"
    fi
    pip_step "installing shardbook (editable)" --no-deps --no-build-isolation -e .
    "$VENV/bin/python" -c "import brainpy, jax, nbval, jupyter_book, shardbook" \
      || { echo "[env] installation failed: the packages do not import" >&2; exit 1; }
    echo "$want" > "$stamp"
    echo "[env] installed in $((SECONDS - t0)) s"
  fi
  export PATH="$VENV/bin:$PATH"
  export PYTHONHASHSEED=0 PYDEVD_DISABLE_FILE_VALIDATION=1
  export TF_CPP_MIN_LOG_LEVEL=2
}

# A full build: every page read and written again (no cached doctrees), so that every
# warning of every page fails it.
# Each step returns on failure: set -e does not reach into a function called as part of
# a condition (./ci/test's check).
build_book() {
  python ci/record.py --ensure || return
  python ci/validation.py || return
  rm -rf _build/html _build/.doctrees
  build_html
}

# Build what changed since the last build (./ci/test: the record page, after its run).
build_html() {
  local t0=$SECONDS
  jupyter-book build . --builder html -W -n --keep-going || return
  echo "[build] 0 warnings (Sphinx ran with -W -n: any warning fails the build)," \
    "$((SECONDS - t0)) s"
  echo "[build] open: $ROOT/_build/html/index.html"
}
