#!/usr/bin/env bash
# Numeric options are checked as they are parsed: a count given a negative value, a value past its
# bound or one that is not a plain decimal number exits 2 before anything runs, and the message names
# the flag and the range. CLI11 would otherwise take "-5" for an unsigned option as 2^64 - 5.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)

# refused MESSAGE ARGS...: exit 2 and MESSAGE (a fixed string) on stderr, nothing on stdout.
refused() {
  local want=$1; shift
  expect_exit 2 "${F[@]}" "$@"
  expect_in "$WORK/err" "$want"
  [ -s "$WORK/out" ] && fail "printed on stdout: $*"
}

# --threads: never negative, never more than max(1024, 4 per hardware thread); the cap is in --help.
cap=$(( $(nproc) * 4 > 1024 ? $(nproc) * 4 : 1024 ))
for v in -1 100000 4294967297 18446744073709551616 abc 0x10; do
  refused "--threads must be an integer from 0 to $cap, not '$v'" --threads "$v" train --steps 1
done
refused "--threads must be an integer from 0 to $cap" train --steps 1 --threads -1   # after the subcommand too
expect_exit 0 "$FPGATHER" --help
expect_in "$WORK/out" "at most 1024 or 4 per hardware thread"
expect_in "$WORK/out" "(0 to $cap)"

# train: counts, and the bounds that size memory.
refused "train: --steps must be an integer from 1 to 10000000, not '-5'" train --steps -5
refused "--steps must be an integer from 1 to 10000000, not '10000001'" train --steps 10000001
refused "--steps must be an integer from 1 to 10000000, not '18446744073709551611'" train --steps 18446744073709551611
refused "--accumulation must be an integer from 1 to 65536, not '-1'" train --steps 1 --accumulation -1
refused "--accumulation must be an integer from 1 to 65536, not '0'" train --steps 1 --accumulation 0
refused "--micro-batch must be an integer from 1 to 1048576, not '2147483647'" train --steps 1 --micro-batch 2147483647
refused "--micro-batch must be an integer from 1 to 1048576, not '-3'" train --steps 1 --micro-batch -3
refused "--save-every must be an integer of at least 0, not '-1'" train --steps 1 --save-every -1
refused "--keep must be an integer of at least 0, not '-1'" train --steps 1 --keep -1
refused "--seed must be an integer of at least 0, not '-1'" train --steps 1 --seed -1
refused "--seed must be an integer of at least 0, not '18446744073709551616'" train --steps 1 --seed 18446744073709551616
refused "--log-every must be an integer of at least 0, not '-2'" train --steps 1 --log-every -2
refused "--dp must be an integer from 1 to 4096, not '-1'" train --steps 1 --dp -1
refused "--dp must be an integer from 1 to 4096, not '0'" train --steps 1 --dp 0
refused "--bucket-size must be an integer from 1 to 281474976710656, not '-5'" train --steps 1 --bucket-size -5
refused "--bucket-size must be an integer from 1 to 281474976710656, not '-1'" train --steps 1 --bucket-size -1
refused "--amax-history must be an integer from 1 to 65536, not '0'" train --steps 1 --fp8 delayed --amax-history 0
refused "--ns-steps must be an integer from 0 to 100, not '-1'" train --steps 1 --optimizer muon --ns-steps -1
# A product that would allocate past its bound, though each value is in range: the library's check.
expect_exit 2 "${F[@]}" train --steps 1 --model base --micro-batch 1048576
expect_in "$WORK/err" "micro-batch of 1048576 rows"
# Floating options: the range in words.
refused "--lr must be a number greater than 0, not '-0.1'" train --steps 1 --lr -0.1
refused "--lr must be a number greater than 0, not 'nan'" train --steps 1 --lr nan
refused "--eps must be a number at least 0, not '-1e-8'" train --steps 1 --eps -1e-8
refused "--weight-decay must be a number at least 0, not '-1'" train --steps 1 --weight-decay -1
refused "--momentum must be a number at least 0 and less than 1, not '1'" train --steps 1 --momentum 1
refused "--clip-grad must be a number at least 0, not '-1'" train --steps 1 --clip-grad -1
refused "--betas must each be at least 0 and less than 1, not '0.9,1.5'" train --steps 1 --betas 0.9,1.5
# A value in range still runs, and help states the ranges.
expect_exit 0 "${F[@]}" train --steps 1 --model tiny --dp 1 --accumulation 2 --micro-batch 4 --seed 18446744073709551615
# Decimal always: CLI11 alone would read 010 as octal 8.
expect_exit 0 "${F[@]}" --json train --steps 010 --model tiny --dp 1
expect_in "$WORK/out" '"steps": 10'
expect_exit 0 "${F[@]}" train --help
expect_in "$WORK/out" "Optimizer steps (1 to 10000000)"
expect_in "$WORK/out" "(0 or more)"

# step shares the pipeline options.
refused "step: --dp must be an integer from 1 to 4096, not '-1'" step --params a --grads b --out c --dp -1

# reshard: its --bucket-size is a count or none, the others counts with bounds.
refused "--bucket-size must be none or a number of elements from 1 to 281474976710656, not '-5'" \
  reshard "$WORK/src" "$WORK/dst" --dp 2 --bucket-size -5
refused "--dp must be an integer from 1 to 65536, not '-1'" reshard "$WORK/src" "$WORK/dst" --dp -1
refused "--accumulation must be an integer from 1 to 65536, not '-1'" reshard "$WORK/src" "$WORK/dst" --dp 2 --accumulation -1
refused "--chunk-bytes must be an integer from 1 to 1073741824, not '-1'" reshard "$WORK/src" "$WORK/dst" --dp 2 --chunk-bytes -1

# convert and diff.
refused "--amax-history must be an integer from 1 to 65536, not '-1'" convert "$WORK/a" "$WORK/b" --amax-history -1
refused "--max-shard-size must be a positive size below 2^64 bytes" convert "$WORK/a" "$WORK/b" --max-shard-size -5GB
refused "--max-shard-size must be a positive size below 2^64 bytes" convert "$WORK/a" "$WORK/b" --max-shard-size 1e30GB
refused "--max-reports must be an integer from 0 to 1000000, not '-1'" diff "$WORK/a" "$WORK/b" --max-reports -1
refused "--rtol must be a number at least 0, not '-1'" diff "$WORK/a" "$WORK/b" --rtol -1

# bench: one per family.
refused "--rows must be an integer from 1 to 16777216, not '-1'" bench quantize --rows -1
expect_exit 2 "${F[@]}" bench quantize --rows 16777216 --cols 16777216
expect_in "$WORK/err" "--rows x --cols must be at most 4294967296 elements"
refused "--thread-counts: 100000 threads is more than $cap" bench quantize --thread-counts 1,100000
refused "--reps must be an integer from 1 to 1000, not '0'" bench io --reps 0
refused "--size-gib must be a number greater than 0 and at most 4096, not '-1'" bench io --size-gib -1
refused "--chunks must be an integer from 1 to 100000000, not '-1'" bench validate --chunks -1
refused "--steps must be an integer from 1 to 10000000, not '-1'" bench step --steps -1
refused "--iters must be an integer from 1 to 1000000, not '-1'" bench comm --iters -1
refused "--warmup must be an integer from 0 to 1000000, not '-1'" bench gpu-optim --warmup -1
refused "--chunk-bytes must be an integer from 4 to 1073741824, not '-4'" bench dcp-make "$WORK/x" --chunk-bytes -4
refused "--export-reps must be an integer from 0 to 1000, not '-1'" bench dcp "$WORK/x" --export-reps -1

finish
