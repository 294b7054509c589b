# One device call for issue #31 items 1 and 2 (run from the tree's root): block_moves --quick
# --shift 0 with the kernels before (bm_old, kernels at e539ed7) and after (bm_new) moves.cuh,
# alternating, then the w72 gemm-ar intra-SM checks. $1: output dir.
set -u
O=$1
nvidia-smi --query-gpu=uuid,name,driver_version,clocks.max.sm,clocks.sm,temperature.gpu,power.draw --format=csv > $O/gpu.txt
date -u +%FT%TZ >> $O/gpu.txt
chmod +x ab/bm_old ab/bm_new
t0=$(date +%s)
for i in 1 2 3 4 5 6 7 8; do
  if [ $((i % 2)) = 1 ]; then order="new old"; else order="old new"; fi
  for v in $order; do
    s=$(date +%s%N)
    timeout 40 ab/bm_$v --quick --shift 0 > $O/bm_${v}_$i.jsonl 2>> $O/bm.err
    echo "bm_$v $i rc=$? $(( ($(date +%s%N) - s) / 1000000 )) ms" | tee -a $O/bm.log
  done
  [ $(( $(date +%s) - t0 )) -gt ${BM_BUDGET:-100} ] && break
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv >> $O/gpu.txt
(cd $O && tar czf bm.tgz bm_*.jsonl && rm -f bm_*.jsonl)
PYTHONUNBUFFERED=1 timeout ${GA_TIMEOUT:-170} python3 ab/gemm_ar_checks.py ab/libgemm-ar-070978d6fe0b.so $O/gemm_ar_w72.jsonl ${GA_SECONDS:-120} 2>&1 | tee $O/gemm_ar.log | tail -5
date -u +%FT%TZ >> $O/gpu.txt
