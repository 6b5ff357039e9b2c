#!/bin/sh
# The Rust function under `strace -c -f`, for its system-call counts, with
# the variables cfn-once-bench passes through to the function (PERF_TARGET, PERF_OUT):
#   PERF_TARGET=target/release/cfn-once-lambda PERF_OUT=target/strace.txt \
#     ./target/debug/cfn-once-bench --pairs 1 --warm-batches 30 --modes tls \
#     --rust-binary benches/perf/strace.sh --out target/strace.md
# As with record.sh, strace is not exec'd: the bench kills what it started (SIGKILL), and strace
# must outlive that to write its summary.
strace -c -f -o "$PERF_OUT" -- "$PERF_TARGET" &
wait
