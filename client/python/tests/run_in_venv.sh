#!/usr/bin/env bash
# The Python client's tests as one CTest test:
#   run_in_venv.sh VENV_DIR SERVER_BINARY [pytest args...]
# Makes a virtual environment at VENV_DIR (kept and reused by later runs),
# installs this checkout's client/python with its test extra from PyPI, and
# runs pytest against SERVER_BINARY. Exits 77 (CTest's SKIP_RETURN_CODE) only
# when python3 or its venv module is missing; a failed install fails.
set -euo pipefail
venv=$1
server=$2
shift 2
package=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON3:-python3}
if ! command -v "$python" >/dev/null; then
  echo "SKIP: python3 not found (Debian: apt-get install python3)"
  exit 77
fi
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
  echo "SKIP: python3 cannot make a venv (Debian: apt-get install python3-venv)"
  exit 77
fi
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
# pip's cache stays with the venv, under the build tree.
export PIP_CACHE_DIR=$venv/pip-cache PIP_DISABLE_PIP_VERSION_CHECK=1
start=$SECONDS
"$venv/bin/python" -m pip install --quiet "$package[test]"
echo "[python-client] venv ready in $((SECONDS - start)) s"
# From the venv, so that the installed package is what is tested.
cd "$venv"
exec "$venv/bin/python" -m pytest -p no:cacheprovider -q "$package/tests" \
  --server="$server" "$@"
