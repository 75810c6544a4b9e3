#!/usr/bin/env bash
# nightly.sh: one scheduled DP-SynRAG build: build, verify, publish, purge the state.
# Runbook: runbooks/scheduled-build.md.
#
# Usage:
#   nightly.sh --input FILE --root DIR --corpus-ledger PATH --date YYYY-MM-DD
#              [--state-root DIR] [--config TOML] [--signing-key KEY.pem]
#              [--public-key KEY.pub] [-- BUILD-CORPUS OPTIONS...]
#
# Layout (every path derived from --root and --date, so a retry finds the same ones):
#   ROOT/corpora/DATE        the synthetic corpus of that night (the hand-off)
#   STATE_ROOT/DATE          its state directory (default STATE_ROOT = ROOT/state): the build's
#                            ledger and PRIVATE intermediates; deleted once the corpus verified
#                            and was published
#   ROOT/logs/DATE.summary.json  build-corpus --summary-json (operator side: exact counts)
#   ROOT/logs/DATE.charge.json   the night's corpus-ledger charge(s) and certificate sha256
#   ROOT/current             symlink to corpora/DATE, switched atomically after verify
#
# Exit codes (build-corpus's, passed through):
#   0 built, verified and published (or already published: nothing done)
#   1 failed (build error, or verify failed: nothing published)  -> retry once, then page
#   2 bad input or options, state directory locked or mismatched,
#     another nightly.sh holds ROOT                                -> page, do not retry
#   3 refused by the privacy budget (corpus ledger cap)            -> do not retry
#   4 interrupted (SIGTERM/SIGINT/SIGHUP)                          -> rerun the same command
#     (whatever the build died of once a stop request came)
#   5 built, but no synthetic text kept (nothing published)        -> page, do not retry
# A rerun of the same command (same --date) resumes: the same state directory, nothing
# charged twice. The script never passes --force and never makes a second state directory
# for a date, so one date is charged to the corpus ledger at most once.
set -euo pipefail

prog=nightly.sh
die() { echo "$prog: error: $1" >&2; exit "${2:-2}"; }
log() { echo "$prog: $*" >&2; }
need() { [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value"; }

input="" root="" ledger="" date="" state_root="" config="" signing_key="" public_key=""
extra=()
while (($#)); do
    case "$1" in
        --input) need "$@"; input=$2; shift 2 ;;
        --root) need "$@"; root=$2; shift 2 ;;
        --corpus-ledger) need "$@"; ledger=$2; shift 2 ;;
        --date) need "$@"; date=$2; shift 2 ;;
        --state-root) need "$@"; state_root=$2; shift 2 ;;
        --config) need "$@"; config=$2; shift 2 ;;
        --signing-key) need "$@"; signing_key=$2; shift 2 ;;
        --public-key) need "$@"; public_key=$2; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (build-corpus options go after --)" ;;
    esac
done
[[ -n $input ]] || die "--input is required"
[[ -n $root ]] || die "--root is required"
# No default on purpose: a ledger derived from a dated input path would be a new, empty ledger
# every night, and the lifetime cap would never be reached.
[[ -n $ledger ]] || die "--corpus-ledger is required (one fixed path for every night)"
# No default on purpose: a retry after midnight must not become a new build of a new date.
[[ -n $date ]] || die "--date is required (pin it per scheduled run, e.g. \$(date -u +%F))"
[[ $date =~ ^[0-9A-Za-z][0-9A-Za-z._-]*$ ]] || die "--date must be a plain name, got '$date'"
[[ $input == *://* || -e $input ]] || die "$input: input not found"
if [[ -n $signing_key ]]; then
    # build-corpus checks the key before spending too; checking here also fails before the lock
    [[ -r $signing_key ]] || die "$signing_key: signing key not readable"
    mode=$(stat -L -c %a "$signing_key")
    (( (8#$mode & 8#077) == 0 )) || die "$signing_key: mode $mode; the signing key must be 0600 or 0400"
    public_key=${public_key:-$signing_key.pub}
fi
[[ -z $public_key || -r $public_key ]] || die "$public_key: public key not readable"
for cmd in build-corpus dpsynrag python3 flock; do
    command -v "$cmd" >/dev/null || die "$cmd not found on PATH"
done

state_root=${state_root:-$root/state}
# Absolute paths: the corpus ledger's charge names them ("input ...; out ..."), and a retry from
# another working directory (a Ray job) must name the same ones.
[[ $input == *://* ]] || input=$(realpath -- "$input")
root=$(realpath -m -- "$root")
state_root=$(realpath -m -- "$state_root")
ledger=$(realpath -m -- "$ledger")
out="$root/corpora/$date"
state="$state_root/$date"
summary="$root/logs/$date.summary.json"
mkdir -p "$root/corpora"
mkdir -p "$root/logs" "$state_root"
chmod 0700 "$root/logs" "$state_root"

# One nightly.sh per ROOT at a time: two runs would both build, and race on `current`.
exec 9>>"$root/.nightly.lock"
flock -n 9 || die "another nightly.sh is running on $root (lock $root/.nightly.lock held)"

# Stop requests (Kubernetes, `timeout`, an operator) are forwarded to the build, which exits 4
# (15 if the signal lands while it starts its local Ray instance); whatever it exits with,
# this script then exits 4: the state directory is resumable after any kind of death.
interrupted=0
child=""
# shellcheck disable=SC2329  # invoked by the trap below
on_signal() {
    interrupted=1
    if [[ -n $child ]]; then kill -TERM "$child" 2>/dev/null || true; fi
}
trap on_signal TERM INT HUP
check_interrupted() {
    if ((interrupted)); then
        log "interrupted${1:+ (build-corpus exited $1)}; run the same command again to resume" \
            "(nothing is spent twice)"
        exit 4
    fi
}

published() {
    [[ -L $root/current && $(readlink "$root/current") == "corpora/$date" ]]
}

if published; then
    log "$date is already published ($root/current -> corpora/$date)"
    if [[ -e $state ]]; then rm -rf -- "$state"; log "purged the leftover state $state"; fi
    exit 0
fi

if [[ -e $out ]]; then
    # The output appears (atomically) only when a build completed: a run stopped after the
    # build. Do not build again; verify and publish what is there.
    log "$out exists (the build of $date completed earlier): verifying it"
else
    args=("$input" -o "$out" --state-dir "$state" --corpus-ledger "$ledger"
          --summary-json "$summary")
    [[ -z $config ]] || args+=(--config "$config")
    [[ -z $signing_key ]] || args+=(--signing-key "$signing_key")
    log "building $date: build-corpus ${args[*]} ${extra[*]}"
    build-corpus "${args[@]}" "${extra[@]}" &
    child=$!
    rc=0
    while :; do
        rc=0
        wait "$child" || rc=$?
        # wait also returns when a trapped signal arrives: go on waiting for the build itself
        if kill -0 "$child" 2>/dev/null; then continue; fi
        break
    done
    child=""
    check_interrupted "$rc"
    if ((rc != 0)); then
        log "build-corpus exited $rc; nothing published"
        exit "$rc"
    fi
    chmod 0600 "$summary"
fi
check_interrupted

verify=(dpsynrag verify "$out")
if [[ -n $public_key ]]; then
    verify+=(--public-key "$public_key")
else
    log "warning: no --public-key: verify checks integrity against the certificate's own key only"
fi
if ! "${verify[@]}"; then
    log "verify failed for $out; nothing published, state kept in $state"
    exit 1
fi
if ! python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["seeded"] is not False)' \
        "$out/certificate.json"; then
    log "$out: the certificate says seeded (a --seed test build) or is unreadable; not published"
    exit 1
fi
check_interrupted

# The audit record of this night: its corpus-ledger charge(s) (the ledger names each build's
# input and output directory) and the sha256 of the certificate it produced.
record="$root/logs/$date.charge.json"
dpsynrag ledger show --corpus-ledger "$ledger" --json > "$record.ledger"
python3 - "$record.ledger" "$out" "$input" "$date" > "$record.tmp" <<'EOF'
import hashlib
import json
import sys

ledger_json, out, source, date = sys.argv[1:]
summary = json.load(open(ledger_json))
cert_bytes = open(f"{out}/certificate.json", "rb").read()
charges = [c for c in summary["build_charges"] if c["description"].endswith(f"; out {out}")]
if len(charges) != 1:
    print(f"nightly.sh: warning: {len(charges)} corpus-ledger charges name {out}",
          file=sys.stderr)
print(json.dumps({
    "date": date, "input": source, "corpus_ledger": summary["path"],
    "charges": [{k: c[k] for k in ("key", "rho", "charged_at")} for c in charges],
    "certificate_sha256": hashlib.sha256(cert_bytes).hexdigest(),
    "certificate_rho": json.loads(cert_bytes)["guarantee"]["rho"]}, indent=1))
EOF
mv "$record.tmp" "$record"

# Publish: a new symlink renamed over `current` (rename(2) is atomic: readers see the old or
# the new corpus, never a missing one). The target is relative, so ROOT can be mounted anywhere.
previous=$(readlink "$root/current" 2>/dev/null || true)
if [[ -n $previous && ${previous#corpora/} > $date ]]; then
    log "$root/current -> $previous is newer than $date: verified, not switched back"
else
    ln -sfn "corpora/$date" "$root/.current.$$"
    mv -T "$root/.current.$$" "$root/current"
    log "published $root/current -> corpora/$date"
fi

# The state directory holds private intermediates; it is not needed once the corpus verified.
rm -rf -- "$state"
log "purged $state"
python3 - "$record.ledger" >&2 <<'EOF'
import json
import sys

s = json.load(open(sys.argv[1]))
spent = s["spent"]
line = f"nightly.sh: corpus ledger: {s['builds']} build(s), spent rho={spent['rho']:.6f}"
if spent["epsilon"] is not None:
    line += f", epsilon={spent['epsilon']:.4f} at delta={spent['delta']:g}"
if s["remaining_epsilon"] is not None:
    line += f", remaining epsilon={s['remaining_epsilon']:.4f} of cap {s['cap']['epsilon']:g}"
print(line)
EOF
rm -f -- "$record.ledger"
exit 0
