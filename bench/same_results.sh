#!/usr/bin/env bash
# Runs every committed scenario (shortened where long) from a checkout, to compare two checkouts'
# results files byte for byte (rounds.csv, devices.csv): the check a refactoring must pass.
#   bench/same_results.sh OLD_CHECKOUT old/   &&   bench/same_results.sh NEW_CHECKOUT new/
#   bench/same_results.sh --compare old/ new/
# PYTHON names the interpreter (default: python); each checkout's code runs through PYTHONPATH.
set -u
if [ "${1:-}" = "--compare" ]; then
    status=0
    for d in "$2"/*/; do n=$(basename "$d"); for f in rounds.csv devices.csv; do
        if cmp -s "$2/$n/$f" "$3/$n/$f"; then echo "same   $n/$f"; else echo "DIFFER $n/$f"; status=1; fi
    done; done
    exit $status
fi
SRC=$(cd "$1" && pwd); mkdir -p "$2"; OUT=$(cd "$2" && pwd); PY=${PYTHON:-python}
run() { name=$1; shift; ( cd "$SRC" && PYTHONPATH="$SRC" $PY -m p2pfed.cli.main run "$@" --quiet \
    --out "$OUT/$name" > "$OUT/$name.log" 2>&1; echo "$name rc=$?" >> "$OUT/status" ); }
run quickstart scenarios/quickstart.yaml --set rounds=20
run synthetic-small scenarios/synthetic-small.yaml
run digits-cnn scenarios/digits-cnn.yaml --set rounds=4
run digits-dirichlet scenarios/digits-dirichlet.yaml --set rounds=10
run own-data scenarios/own-data-example.yaml
run wisdm-static scenarios/wisdm-static.yaml --set rounds=15
run wisdm-dynamic scenarios/wisdm-dynamic.yaml --set rounds=15
run wisdm-paperlike scenarios/wisdm-paperlike.yaml --set rounds=15
run opp-poisson scenarios/opportunistic-poisson.yaml --set contacts.duration_s=3600
run opp-rwp scenarios/opportunistic-rwp.yaml --set contacts.duration_s=3600
run opp-trace scenarios/opportunistic-trace-example.yaml
run sociopatterns scenarios/sociopatterns.yaml --set contacts.duration_s=3600
run rwp-1000 scenarios/synthetic-rwp-1000.yaml --set contacts.duration_s=1800
run ex-dropout examples/dropout-model.yaml --set rounds=10
run ex-energy examples/energy-aware.yaml --set rounds=10
run ex-loss examples/loss-weighted.yaml --set rounds=10
run poisson-gossip scenarios/opportunistic-poisson.yaml --algorithm gossip-avg --set contacts.duration_s=3600
run quickstart-gossip scenarios/quickstart.yaml --algorithm gossip-avg --set rounds=10
