#!/usr/bin/env bash
# Rerun the SpeeChain parity check: every SpeeChain recipe with a data_cfg, run with SpeeChain's own iterator
# classes and with speechiter (unchanged recipe files), batches compared epoch by epoch.
#
#   tools/speechain_parity/verify_speechain.sh SPEECHAIN_CHECKOUT [PYTHON]
#
# SPEECHAIN_CHECKOUT: a SpeeChain source tree (heli-qi/SpeeChain; last checked against 92be03b)
# PYTHON: the Python with speechiter installed (default: python)
# $PARITY_SEED: one seed for every run instead of the recipes' own (as the runner's --seed), on all three sides
# $PARITY_WORK: where the venv, the corpus and the results go (default: $TMPDIR/speechain_parity)
# No SpeeChain code is in speechiter: SpeeChain's classes are imported from the checkout, in a venv of their own.
# Exit 0 when every run is identical or differs only by speechiter's documented fixes 2 and 3 (and fix 1).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
SRC="$(cd "${1:?usage: verify_speechain.sh SPEECHAIN_CHECKOUT [PYTHON]}" && pwd)"
PY="${2:-python}"
WORK="${PARITY_WORK:-${TMPDIR:-/tmp}/speechain_parity}"
VENV="$WORK/venv"
OUT="$WORK/out"

# SpeeChain's side: a venv over the system packages (torch, numpy, soundfile, h5py, scipy, pyworld) plus what
# its modules import; torchaudio, g2p_en and librosa are stubs (batching never calls them), see stubs/.
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv --system-site-packages "$VENV"
  "$VENV/bin/pip" install -q ruamel.yaml GPUtil humanfriendly
fi
SC() { PYTHONPATH="$HERE/stubs" "$VENV/bin/python" "$@"; }

# $SPEECHAIN_ROOT holds SpeeChain's recipes/ (copied unchanged) and the synthetic datasets/ beside it.
export SPEECHAIN_ROOT="$WORK/corpus"
rm -rf "$SPEECHAIN_ROOT" "$OUT" && mkdir -p "$SPEECHAIN_ROOT" "$OUT"
cp -r "$SRC/recipes" "$SPEECHAIN_ROOT/"

SC "$HERE/scan_recipes.py" "$SRC" > "$OUT/recipes.json"
"$PY" "$HERE/make_corpus.py" "$OUT/recipes.json"
SC "$HERE/speechain_batches.py" "$SRC" "$OUT/recipes.json" "$OUT/speechain.json" 2>/dev/null
(cd "$WORK" && "$PY" "$HERE/speechiter_batches.py" "$OUT/recipes.json" "$OUT/speechiter.json")

rc=0
"$PY" "$HERE/compare.py" "$OUT/speechain.json" "$OUT/speechiter.json" "$OUT/details.json" || rc=1
"$PY" "$HERE/cli_check.py" "$OUT/speechain.json" || rc=1
echo "verify_speechain: $([ $rc = 0 ] && echo 'OK: all runs match SpeeChain except documented fixes' || echo 'REAL DIFFERENCES (see above)')"
exit $rc
