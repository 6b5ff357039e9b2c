#!/bin/sh
# The Rust function under `perf record`, for `make profile`: cfn-once-bench starts this in the
# function's place (--rust-binary), with PERF_TARGET (the function) and PERF_OUT (the data file)
# passed through. perf is not exec'd: the bench kills what it started (SIGKILL), and perf must
# outlive that to write its file; it stops when the function does, once the Runtime API is gone.
perf record -F 15000 --call-graph dwarf,32768 -o "$PERF_OUT" -- "$PERF_TARGET" &
wait
