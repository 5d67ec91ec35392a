#!/usr/bin/env bash
# The newest-Flower check: does fl-async work with the newest Flower the package index has?
#
# It finds the newest release of `flwr` and the newest build of `flwr-nightly` (pip index), and
# if one of them is newer than the flwr of the project's environment (.venv, what CI tests), it
# builds a separate venv (.venv-newest, git-ignored) with the dev install, swaps its flwr for
# that build, then runs the fast tests (-m "not slow") and the main job (python -m fl_async.app)
# in it. When nothing newer exists it says so and exits 0. Not part of .ci/run (it takes
# minutes); run it by hand before raising flwr's upper bound or after a Flower release:
#   scripts/newest_flower.sh            # from the repository root; needs .venv (README)
#   FLOWER=flwr-nightly==1.43.0.dev20261026 scripts/newest_flower.sh   # a given build
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=.venv/bin/python
NEWEST=.venv-newest
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1

if [[ ! -x $BASE ]]; then
    echo "newest_flower.sh: no $BASE; make the project's venv first (README, Development)" >&2
    exit 2
fi
current=$($BASE -c "import flwr; print(flwr.__version__)")

# "pip index versions" prints "<name> (<newest>)" first; --pre to see the nightly builds.
newest_of() { $BASE -m pip index versions "$1" --pre 2>/dev/null | sed -n '1s/.*(\(.*\)).*/\1/p'; }

if [[ -n ${FLOWER:-} ]]; then
    package=${FLOWER%%==*}
    version=${FLOWER#*==}
else
    release=$(newest_of flwr)
    nightly=$(newest_of flwr-nightly)
    echo "flwr here: $current; newest flwr: ${release:-none}; newest flwr-nightly: ${nightly:-none}"
    package=""
    version=$current
    for candidate in "flwr==$release" "flwr-nightly==$nightly"; do
        name=${candidate%%==*}
        found=${candidate#*==}
        [[ -z $found ]] && continue
        if $BASE - "$found" "$version" <<'EOF'
import sys
from packaging.version import Version

sys.exit(0 if Version(sys.argv[1]) > Version(sys.argv[2]) else 1)
EOF
        then
            package=$name
            version=$found
        fi
    done
    if [[ -z $package ]]; then
        echo "newest_flower.sh: skipped: nothing newer than flwr $current on the index"
        exit 0
    fi
fi
echo "== checking fl-async with $package==$version (the project's venv has flwr $current)"

started=$(date +%s)
rm -rf "$NEWEST"
python3 -m venv "$NEWEST"
"$NEWEST/bin/pip" install -q -e ".[dev]"
# flwr-nightly installs the same `flwr` package under another name: remove flwr first.
"$NEWEST/bin/pip" uninstall -q -y flwr
"$NEWEST/bin/pip" install -q "$package==$version"
got=$("$NEWEST/bin/python" -c "import flwr; print(flwr.__version__)")
echo "installed flwr $got in $NEWEST ($(($(date +%s) - started)) s)"

echo "== fast tests (-m 'not slow')"
tests_started=$(date +%s)
"$NEWEST/bin/python" -m pytest -m "not slow" -q -p no:cacheprovider | tail -n 3
echo "fast tests: $(($(date +%s) - tests_started)) s"

echo "== the main job (python -m fl_async.app)"
job_started=$(date +%s)
output=$(mktemp -d)
"$NEWEST/bin/python" -m fl_async.app --run-config "output-dir='$output/main'" | tail -n 2
echo "main job: $(($(date +%s) - job_started)) s; results in $output/main"
echo "newest_flower.sh: fl-async passes with flwr $got ($package==$version)"
