# SM clock and power (nvidia-smi every 50 ms) while block_moves runs and while six 1 GiB
# collectives of the suite run (build/clk: their libraries and cases); results in
# validation/data/h200-clocks-2026-12-02.csv and -marks.txt (docs/VALIDATION.md).
# build/exp-st/block_moves: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/include
# -I kernels -o build/exp-st/block_moves validation/microbench/block_moves.cu
set -u
mkdir -p $OUT/c
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 50 > $OUT/c/smi.csv 2>&1 &
P=$!
sleep 1
echo "bm start $(date -u +%H:%M:%S.%N)" >> $OUT/c/marks.txt
timeout 60 build/exp-st/block_moves > $OUT/c/bm.jsonl 2> $OUT/c/bm.err
echo "bm end $(date -u +%H:%M:%S.%N)" >> $OUT/c/marks.txt
sleep 2
echo "coll start $(date -u +%H:%M:%S.%N)" >> $OUT/c/marks.txt
CUDA_MODULE_LOADING=EAGER timeout 120 python3 -m validation.run_collectives --cases build/clk/cases.json  # TMA and register sums at 1 GiB from the pksim validate bundle --out $OUT/c/coll.jsonl 2> $OUT/c/coll.log
echo "coll end $(date -u +%H:%M:%S.%N)" >> $OUT/c/marks.txt
sleep 1
kill $P
tar czf $OUT/c.tgz -C $OUT c && rm -rf $OUT/c
