#!/bin/bash
# A one-node Slurm cluster on THIS machine, for testing the SLURM recipe of chapter 5a
# (tests/test_slurm.py); not for production.  Needs Debian's slurm-wlm packages
# (slurmctld, slurmd, slurm-client) and munge, and root:
#
#   apt-get install slurmctld slurmd slurm-client munge
#   recipes/slurm_local_cluster.sh start DIR    # config, state and logs in DIR
#   SLURM_CONF=DIR/slurm.conf srun -n 2 python recipes/run_coba.py ...
#   recipes/slurm_local_cluster.sh stop DIR
#
# The node is "localhost" at 127.0.0.1, so JAX's SLURM detection names the coordinator
# "localhost" (the first node of SLURM_STEP_NODELIST).  Slurm 22.05's daemons bind the
# wildcard address for their own ports (6817/6818 by default, 16817/16818 here): there is
# no option to bind them to loopback, so on a machine with other interfaces they are
# reachable there, unlike the JAX processes of the job.
set -euo pipefail
cmd="${1:?usage: slurm_local_cluster.sh start|stop DIR}"
dir="$(realpath -m "${2:?usage: slurm_local_cluster.sh start|stop DIR}")"

stop() {
  for f in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
    [[ -f "$f" ]] && kill "$(cat "$f")" 2>/dev/null || true
  done
}

if [[ "$cmd" == stop ]]; then stop; exit 0; fi
[[ "$cmd" == start ]] || { echo "unknown command $cmd" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "needs root" >&2; exit 1; }
command -v slurmctld > /dev/null || { echo "slurmctld not installed" >&2; exit 1; }
mkdir -p "$dir/state" "$dir/spool"
cat > "$dir/slurm.conf" <<CONF
ClusterName=book
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$dir/slurm.conf"
if ! pgrep -x munged > /dev/null; then
  mkdir -p /run/munge && chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged
  pgrep -nx munged > "$dir/munged.pid"       # started here: stopped here too
fi
slurmctld -i
slurmd
for _ in $(seq 60); do
  if sinfo -h -o %t 2>/dev/null | grep -qx idle; then echo "slurm: 1 node idle"; exit 0; fi
  sleep 0.5
done
echo "slurm did not come up; see $dir/*.log" >&2
stop
exit 1
