#!/usr/bin/env bash
# The claims study's evaluation suites (benchmarks/RESULTS.md, "The claims study"), in the
# protocol's order, two runs at a time by default (the histories are the same as one at a time,
# but for wall times; what that gains is measured in RESULTS.md, "Runs at a time"). Run it from a
# git worktree at the protocol's commit:
#
#   [RECORDS=RECORDS_DIR] [JOBS=N] bash benchmarks/claims_suites.sh SUITES_DIR [SUITE ...]
#   bash benchmarks/claims_suites.sh --export SUITES_DIR RECORDS_DIR
#
# SUITES_DIR: a folder outside the worktree, where each suite folder is made. SUITE: run only
# these (claims-a-dir, claims-alpha0.05, claims-alpha0.5, claims-alpha1.0, claims-s30, and the
# suites the amended protocol cut: claims-a-ls, claims-b, claims-s100); default: the protocol's
# five, in this order; a failed run does not stop the suites after it (exit 1 at the end,
# naming its suite). Stopped at any point, the same command starts only the runs each suite
# lacks, and a run cut off resumes from its last checkpoint (every CHECKPOINT server steps; a run
# cut before its first starts again), to the history it would have written uninterrupted. No run
# has a wall-time limit. JOBS: runs at a time (default 2, the protocol's); 1 where a session's
# end loses the checkpoints: a run alone goes at about twice the pace, so fewer are cut off.
#
# A machine whose disk does not outlive the session keeps only what was committed. RECORDS_DIR
# (the main checkout's benchmarks/results/suites) holds the suites' records folders: a run that
# RECORDS_DIR/<suite> holds is not run again (fl-async bench --records). --export adds every
# finished run of SUITES_DIR's suite folders to RECORDS_DIR/<suite> (exported the first time,
# merged after), to be committed before the session ends.
set -euo pipefail

USAGE="usage: bash benchmarks/claims_suites.sh SUITES_DIR [SUITE ...] | --export SUITES_DIR RECORDS_DIR"
EXPORT=no
if [[ ${1:-} == --export ]]; then
  EXPORT=yes
  shift
fi
SUITES=${1:?$USAGE}
shift
RECORDS=${RECORDS:-}
PYTHON=${PYTHON:-.venv/bin/python}
JOBS=${JOBS:-2}
if [[ ! $JOBS =~ ^[1-9][0-9]*$ ]]; then
  echo "claims_suites.sh: JOBS=$JOBS; allowed: a whole number of runs at a time, 1 or more" >&2
  exit 2
fi
BENCH=("$PYTHON" -m fl_async.cli bench --seeds 40,41,42,43,44,45,46,47,48,49 --jobs "$JOBS")

# Budgets: SSGD rounds chosen by the budget rule on development seeds 0-2 (RESULTS.md).
R_A_DIR=30
R_A_LS=50
R_S30=40
R_B=30
R_S100=50

# A run's checkpoint, in its output-dir, every this many server steps: a cut run loses at most
# the steps since (SSGD's and GSGM's rounds are few, so they mostly start again, and are short).
CHECKPOINT="checkpoint-every=200"

# The update guard off: every node is honest, the claims are about the papers' rules, and the
# guard refuses some honest updates, in numbers that differ by strategy (RESULTS.md, "The update
# guard on honest runs"). The sweep that chose TUNED ran with it off too.
GUARD="guard.factor=0"

# Every preset at the point the guard-off sweep chose
# (benchmarks/results/suites/presets-a-sweep-guard-off/tuned.json): the defaults, but these five.
TUNED="asgd.lr=0.2 dcasgd.lr=0.2 fadas.lr=0.002 fedbuff.lr=2.0 trendsmooth.lr=0.2"
ALL=ssgd,asgd,gsgm,trendsmooth,fedasync,fedbuff,dcasgd,odsgd,asp,mifa,ca2fl,fadas
SSP=(--variant "ssp=asgd asgd.slack=2")
# Every suite's run config: the tuned settings, checkpoints, the guard off.
CONFIG="$TUNED $CHECKPOINT $GUARD"
DEFAULTS=(
  --variant "asgd-default=asgd asgd.lr='auto'"
  --variant "dcasgd-default=dcasgd dcasgd.lr='auto'"
  --variant "fadas-default=fadas fadas.lr=0.001"
  --variant "fedbuff-default=fedbuff fedbuff.lr=1.0"
  --variant "trendsmooth-default=trendsmooth trendsmooth.lr='auto'"
)

run_suite() {
  local name=$1
  mkdir -p "$SUITES"
  echo "== $name $(date -u +%FT%TZ)"
  local BENCH=("${BENCH[@]}")
  if [[ -n $RECORDS && -f $RECORDS/$name/suite.json ]]; then
    BENCH+=(--records "$RECORDS/$name")
  fi
  case $name in
    claims-a-dir)
      "${BENCH[@]}" --scenario a --splits dirichlet --rounds $R_A_DIR --strategies $ALL \
        --run-config "$CONFIG" "${SSP[@]}" "${DEFAULTS[@]}" --out "$SUITES/$name" ;;
    claims-a-ls)
      "${BENCH[@]}" --scenario a --splits label-skew --rounds $R_A_LS --strategies $ALL \
        --run-config "$CONFIG" "${SSP[@]}" --out "$SUITES/$name" ;;
    claims-s30)
      "${BENCH[@]}" --scenario s --rounds $R_S30 --strategies $ALL \
        --run-config "$CONFIG" "${SSP[@]}" --out "$SUITES/$name" ;;
    claims-alpha0.05 | claims-alpha0.5 | claims-alpha1.0)
      "${BENCH[@]}" --scenario a --splits dirichlet --rounds $R_A_DIR --strategies ssgd,asgd,gsgm \
        --run-config "$CONFIG partition.alpha=${name#claims-alpha}" --out "$SUITES/$name" ;;
    claims-b)
      "${BENCH[@]}" --scenario b --splits dirichlet --rounds $R_B --strategies ssgd,gsgm,asgd \
        --run-config "$CONFIG" --out "$SUITES/$name" ;;
    claims-s100)
      "${BENCH[@]}" --scenario s --nodes 100 --rounds $R_S100 \
        --strategies ssgd,fedbuff,fedasync,fadas --run-config "$CONFIG" --out "$SUITES/$name" ;;
  esac
}

# Every finished run of the suite folder into RECORDS_DIR/<suite> (nothing when it has none).
export_suite() {
  local name=$1 records=$2
  if ! compgen -G "$SUITES/$name/*/*/history.json" > /dev/null; then
    return 0
  fi
  local how=()
  if [[ -f $records/$name/suite.json ]]; then
    how=(--merge)
  fi
  "$PYTHON" -m fl_async.cli bench --out "$SUITES/$name" --export "$records/$name" "${how[@]}"
}

# The protocol's suites in its order, then those it cut (run only when named).
PROTOCOL=(claims-a-dir claims-alpha0.05 claims-alpha0.5 claims-alpha1.0 claims-s30)
ORDER=("${PROTOCOL[@]}" claims-a-ls claims-b claims-s100)
if [[ $EXPORT == yes ]]; then
  records=${1:?$USAGE}
  for name in "${ORDER[@]}"; do
    export_suite "$name" "$records"
  done
  exit 0
fi
for name in "${@:-${PROTOCOL[@]}}"; do # every name checked before any suite starts
  if [[ ! " ${ORDER[*]} " == *" $name "* ]]; then
    echo "claims_suites.sh: no suite $name; allowed: ${ORDER[*]}" >&2
    exit 2
  fi
done
# A suite with a failed run does not hold up the next (the same command runs that run again);
# an interrupt (exit 130) stops here.
failed=()
for name in "${@:-${PROTOCOL[@]}}"; do
  run_suite "$name" || {
    status=$?
    if ((status == 130)); then exit 130; fi
    failed+=("$name (exit $status)")
  }
done
if ((${#failed[@]})); then
  echo "== done $(date -u +%FT%TZ); runs failed in: ${failed[*]};" \
    "the same command runs them again" >&2
  exit 1
fi
echo "== done $(date -u +%FT%TZ)"
