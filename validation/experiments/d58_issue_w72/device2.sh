# Second device call (issue #31 item 1): the TMA sums of block_moves' own kernels built against
# the kernels before moves.cuh (ab_old), HEAD (ab_new), HEAD with block_moves' sums compiled
# may_shift::no (ab_ns: no shifted instances in the kernel) and the rolled issue loop (ab_v3).
set -u
O=$1
chmod +x ab/ab_*
{ nvidia-smi --query-gpu=uuid,name,driver_version,clocks.sm,temperature.gpu --format=csv; date -u +%FT%TZ; which ncu; } > $O/gpu2.txt 2>&1
for s in 0 2 6; do timeout 30 ab/ab_v3 bm --quick --shift $s > $O/v3_bm_shift$s.jsonl 2>> $O/err.txt; echo "v3 bm shift $s rc=$?" >> $O/log.txt; done
vs="old new ns v3"
for i in 1 2 3 4 5 6 7 8 9 10; do
  for v in $vs; do timeout 20 ab/ab_$v time 9 > $O/t_${v}_$i.jsonl 2>> $O/err.txt || echo "t $v $i rc=$?" >> $O/log.txt; done
  vs="$(echo $vs | cut -d' ' -f2-) $(echo $vs | cut -d' ' -f1)"
done
for i in 1 2 3; do for v in old new v3; do timeout 30 ab/ab_$v bm --quick --shift 0 > $O/bm_${v}_$i.jsonl 2>> $O/err.txt; done; done
(cd $O && tar czf runs.tgz t_*.jsonl bm_*.jsonl v3_bm_*.jsonl && rm -f t_*.jsonl bm_*.jsonl v3_bm_*.jsonl)
for v in old new ns v3; do
  timeout 40 ncu --clock-control none --section WarpStateStats --section InstructionStats --section SchedulerStats --section SpeedOfLight -k regex:move_kernel --launch-skip 3 --launch-count 1 ab/ab_$v prof 8 1 1 > $O/ncu_$v.txt 2>&1
  echo "ncu $v rc=$?" >> $O/log.txt
done
(cd $O && tar czf ncu.tgz ncu_*.txt && rm -f ncu_*.txt)
date -u +%FT%TZ >> $O/gpu2.txt
cat $O/log.txt
