#!/usr/bin/env bash
# A one-node Slurm cluster on this box, with accounting, for trying `snakemake --profile slurm` and for CI.
#
#   sudo bash job-scripts/cluster.sh up       # install what is missing, start munge, MariaDB, slurmdbd,
#                                             # slurmctld, slurmd; add cluster, account, users (idempotent)
#   sudo bash job-scripts/cluster.sh status   # daemons, sinfo, associations; exit 0 only when all is up
#   sudo bash job-scripts/cluster.sh down     # cancel our jobs, stop the daemons it started (by PID)
#   sudo bash job-scripts/cluster.sh purge    # down, then delete the state directory (database included)
#   bash job-scripts/cluster.sh env           # print `export SLURM_CONF=...` for this cluster
#
# Everything lives in one state directory ($MKH_SLURM_DIR, default /var/lib/mkh-slurm): its own
# slurm.conf, gres.conf, slurmdbd.conf, munge key and socket, MariaDB data directory, spool, logs and
# pid files. Nothing under /etc is written and no system service is started: the client commands find
# this cluster through SLURM_CONF, which `up` and `env` print on stdout (progress goes to stderr), so
#
#   eval "$(sudo bash job-scripts/cluster.sh up)"      # or: eval "$(bash job-scripts/cluster.sh env)"
#
# leaves sinfo/sbatch/sacct/snakemake in this shell talking to it.
#
# Partitions and gres types are generated from config/gpu/*.yaml (slurm.partition, slurm.gres): every
# file whose partition is not null adds its partition and, for a gres like gpu:h200:1, the gres type
# h200 backed by fake GPUs (character devices /dev/mkhgpu_<type>_<i>, major 195). The node sits in
# every partition. Settings (environment variables, defaults in brackets):
#   MKH_SLURM_DIR [/var/lib/mkh-slurm]  MKH_SLURM_CLUSTER [mkh]  MKH_SLURM_ACCOUNT [mkh]
#   MKH_SLURM_USERS [root and $SUDO_USER]  MKH_SLURM_GPUS_PER_TYPE [2]
#   MKH_SLURM_CPUS / MKH_SLURM_MEM_MB [max(this box, largest request in config/gpu)]
#   MKH_SLURM_CTLD_PORT [16817] MKH_SLURM_SLURMD_PORT [16818] MKH_SLURM_DBD_PORT [16819]
#   MKH_SLURM_DB_PORT [13306]  MKH_SLURM_DEFAULT_PARTITION [debug]
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${MKH_SLURM_DIR:-/var/lib/mkh-slurm}
CLUSTER=${MKH_SLURM_CLUSTER:-mkh}
ACCOUNT=${MKH_SLURM_ACCOUNT:-mkh}
USERS=${MKH_SLURM_USERS:-root ${SUDO_USER:-}}
GPUS_PER_TYPE=${MKH_SLURM_GPUS_PER_TYPE:-2}
CTLD_PORT=${MKH_SLURM_CTLD_PORT:-16817}
SLURMD_PORT=${MKH_SLURM_SLURMD_PORT:-16818}
DBD_PORT=${MKH_SLURM_DBD_PORT:-16819}
DB_PORT=${MKH_SLURM_DB_PORT:-13306}
DEFAULT_PARTITION=${MKH_SLURM_DEFAULT_PARTITION:-debug}
NODE=$(hostname -s)
ETC=$STATE/etc
RUN=$STATE/run
LOG=$STATE/log
CONF=$ETC/slurm.conf
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd) # start order; stopped in reverse

say() { printf '[cluster] %s\n' "$*" >&2; }
die() { # die MESSAGE [FIX]
    printf '[cluster] ERROR: %s\n' "$1" >&2
    [[ -n ${2:-} ]] && printf '[cluster]   fix: %s\n' "$2" >&2
    exit 1
}
need_root() {
    [[ $EUID -eq 0 ]] || die "'$1' installs packages, creates /dev nodes and starts daemons: it must run as root" \
        "sudo bash job-scripts/cluster.sh $1"
}

# --- pid files: a daemon is ours when its pid file names a live process with the expected name ---
pid_of() { # pid_of NAME -> prints pid if alive and ours
    local f=$RUN/$1.pid pid comm
    [[ -s $f ]] || return 1
    pid=$(tr -dc '0-9' <"$f")
    [[ -n $pid && -r /proc/$pid/comm ]] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [[ $comm == "$1" ]] || return 1
    echo "$pid"
}
alive() { pid_of "$1" >/dev/null; }
wait_for() { # wait_for SECONDS DESCRIPTION COMMAND... ; polls every 0.5 s
    local secs=$1 what=$2 i
    shift 2
    for ((i = 0; i < secs * 2; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    return 1
}
stop_daemon() {
    local name=$1 pid i
    if ! pid=$(pid_of "$name"); then
        say "$name: not running (no live pid in $RUN/$name.pid)"
        rm -f "$RUN/$name.pid"
        return 0
    fi
    say "$name: stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 60; i++)); do
        [[ -d /proc/$pid ]] || break
        sleep 0.5
    done
    if [[ -d /proc/$pid ]]; then
        say "$name: pid $pid ignored SIGTERM for 30 s, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$RUN/$name.pid"
}
log_tail() { [[ -f $1 ]] && { say "last lines of $1:"; tail -n 15 "$1" | sed 's/^/    /' >&2; } || true; }

# --- packages ---
PYTHON=
find_python() {
    local p
    for p in "$REPO/.venv/bin/python" python3; do
        if command -v "$p" >/dev/null && "$p" -c 'import yaml' 2>/dev/null; then
            PYTHON=$p
            return 0
        fi
    done
    return 1
}
install_packages() {
    local -A pkg_of=([slurmctld]=slurmctld [slurmd]=slurmd [sbatch]=slurm-client [slurmdbd]=slurmdbd
        [munged]=munge [mungekey]=munge [mariadbd]=mariadb-server [mariadb-install-db]=mariadb-server
        [mariadb]=mariadb-client [mariadb-admin]=mariadb-client)
    local -A want=()
    local cmd
    for cmd in "${!pkg_of[@]}"; do
        command -v "$cmd" >/dev/null || PATH=$PATH:/usr/sbin:/sbin command -v "$cmd" >/dev/null || want[${pkg_of[$cmd]}]=1
    done
    find_python || want[python3-yaml]=1
    if ((${#want[@]} == 0)); then
        say "packages: slurm, slurmdbd, munge, mariadb present ($(slurmctld -V 2>/dev/null || echo '?'))"
        return 0
    fi
    command -v apt-get >/dev/null || die "missing packages: ${!want[*]} and no apt-get here" \
        "install Slurm 22.05+ (slurmctld slurmd slurmdbd client), munge and MariaDB with your package manager"
    say "packages: installing ${!want[*]} with apt-get (non-interactive)"
    # Keep apt from starting the system services (we run our own instances); only if no policy exists.
    local policy=/usr/sbin/policy-rc.d made_policy=
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT # also when apt-get is interrupted
    fi
    local rc=0
    {
        DEBIAN_FRONTEND=noninteractive apt-get update -q &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${!want[@]}"
    } >"${TMPDIR:-/tmp}/mkh-slurm-apt.log" 2>&1 || rc=$?
    [[ -n $made_policy ]] && { rm -f "$policy"; trap - EXIT; }
    if ((rc != 0)); then
        tail -n 20 "${TMPDIR:-/tmp}/mkh-slurm-apt.log" | sed 's/^/    /' >&2
        die "apt-get install ${!want[*]} failed (log: ${TMPDIR:-/tmp}/mkh-slurm-apt.log)" \
            "check network/apt sources, then run: apt-get update && apt-get install ${!want[*]}"
    fi
    export PATH=$PATH:/usr/sbin:/sbin
    find_python || die "python with PyYAML not found after installing python3-yaml" "apt-get install python3-yaml"
    say "packages: installed ($(slurmctld -V))"
}

# --- configuration generated from config/gpu/*.yaml ---
# Prints lines: "P <partition> <type|-> <count> <file>" and "R <max cpus_per_task> <max mem_mb>".
read_gpu_configs() {
    "$PYTHON" - "$REPO/config/gpu" <<'PY'
import glob, os, re, sys
import yaml
cpus, mem = 1, 1
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.yaml"))):
    rel = os.path.relpath(path)
    with open(path) as f:
        cfg = yaml.safe_load(f) or {}
    slurm = cfg.get("slurm") or {}
    part, gres = slurm.get("partition"), slurm.get("gres")
    if part is None:
        continue
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(part)):
        sys.exit(f"{rel}: slurm.partition {part!r} is not a plain partition name")
    gtype, count = "-", 0
    if gres is not None:
        m = re.fullmatch(r"gpu:([A-Za-z0-9_.-]+):([0-9]+)", str(gres))
        if not m:
            sys.exit(f"{rel}: slurm.gres {gres!r} is not of the form gpu:<type>:<count> "
                     "(the fake cluster needs a gres type per GPU config)")
        gtype, count = m.group(1), int(m.group(2))
    cpus = max(cpus, int(slurm.get("cpus_per_task") or 1))
    mem = max(mem, int(slurm.get("mem_mb") or 1))
    print("P", part, gtype, count, rel)
print("R", cpus, mem)
PY
}

generate_configs() { # writes $ETC/*.new; sets GEN_TYPES (type:count ...) for the devices
    local lines
    lines=$(cd "$REPO" && read_gpu_configs) || die "could not read config/gpu/*.yaml (see the message above)" \
        "fix the named file's slurm.partition / slurm.gres"
    local -A parts=() types=()
    local kind a b c d max_cpus=1 max_mem=1
    while read -r kind a b c d; do
        case $kind in
        P)
            parts[$a]=1
            say "config: $d -> partition $a$([[ $b != - ]] && echo ", gres gpu:$b:$c")"
            if [[ $b != - ]]; then
                local n=$((c > GPUS_PER_TYPE ? c : GPUS_PER_TYPE))
                ((n > ${types[$b]:-0})) && types[$b]=$n
            fi
            ;;
        R) max_cpus=$a max_mem=$b ;;
        esac
    done <<<"$lines"
    ((${#parts[@]} > 0)) || die "no file in config/gpu/*.yaml has a non-null slurm.partition" \
        "set slurm.partition and slurm.gres in config/gpu/<type>.yaml"

    local box_cpus box_mem cpus mem
    box_cpus=$(nproc)
    box_mem=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
    cpus=${MKH_SLURM_CPUS:-$((max_cpus > box_cpus ? max_cpus : box_cpus))}
    mem=${MKH_SLURM_MEM_MB:-$((max_mem > box_mem ? max_mem : box_mem))}
    if ((cpus > box_cpus || mem > box_mem)); then
        say "config: node declares $cpus CPUs / $mem MB (this box: $box_cpus / $box_mem) so that the jobs'" \
            "requests from config/gpu fit (SlurmdParameters=config_overrides); fine for trying, not for measuring"
    fi

    local gres_node="" tres="gres/gpu" gres_conf="AutoDetect=off"$'\n' t i minor=100
    GEN_DEVICES=()
    for t in $(printf '%s\n' "${!types[@]}" | sort); do
        gres_node+="${gres_node:+,}gpu:$t:${types[$t]}"
        tres+=",gres/gpu:$t"
        for ((i = 0; i < types[$t]; i++)); do
            gres_conf+="NodeName=$NODE Name=gpu Type=$t File=/dev/mkhgpu_${t}_$i"$'\n'
            GEN_DEVICES+=("/dev/mkhgpu_${t}_$i:$minor")
            minor=$((minor + 1))
        done
    done

    mkdir -p "$ETC" "$RUN" "$LOG" "$STATE/spool/ctld" "$STATE/spool/d"
    {
        echo "# Generated by job-scripts/cluster.sh from $REPO/config/gpu/*.yaml; do not edit."
        cat <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$RUN/munge.socket
CredType=cred/munge
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$RUN/munge.socket
AccountingStorageEnforce=associations
AccountingStorageTRES=$tres
AccountingStoreFlags=job_comment
MailProg=/bin/true
MinJobAge=300
KillWait=10
InactiveLimit=0
SlurmctldTimeout=60
SlurmdTimeout=60
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem${gres_node:+ Gres=$gres_node} State=UNKNOWN
PartitionName=$DEFAULT_PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
        local p
        for p in $(printf '%s\n' "${!parts[@]}" | sort); do
            [[ $p == "$DEFAULT_PARTITION" ]] && continue
            echo "PartitionName=$p Nodes=$NODE MaxTime=INFINITE State=UP"
        done
    } >"$ETC/slurm.conf.new"
    printf '%s' "$gres_conf" >"$ETC/gres.conf.new"

    [[ -s $ETC/db.pass ]] || { (umask 077 && head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$ETC/db.pass"); }
    (
        umask 077
        cat >"$ETC/slurmdbd.conf.new" <<EOF
# Generated by job-scripts/cluster.sh; do not edit.
AuthType=auth/munge
AuthInfo=socket=$RUN/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$ETC/db.pass")
StorageLoc=slurm_acct_db
EOF
    )
}
# install_configs: move *.new into place; prints the names of files that changed
install_configs() {
    local f
    for f in slurm.conf gres.conf slurmdbd.conf; do
        if [[ -f $ETC/$f ]] && cmp -s "$ETC/$f.new" "$ETC/$f"; then
            rm -f "$ETC/$f.new"
        else
            mv -f "$ETC/$f.new" "$ETC/$f"
            echo "$f"
        fi
    done
    chmod 600 "$ETC/slurmdbd.conf"
    chmod 644 "$ETC/slurm.conf" "$ETC/gres.conf"
}
make_devices() {
    local d path minor
    : >"$RUN/devices"
    for d in "${GEN_DEVICES[@]}"; do
        path=${d%:*} minor=${d##*:}
        if [[ ! -c $path ]]; then
            [[ -e $path ]] && die "$path exists and is not a character device" "remove $path"
            mknod "$path" c 195 "$minor" || die "mknod $path c 195 $minor failed" "run as root on a machine where /dev is writable"
        fi
        echo "$path" >>"$RUN/devices"
    done
}
remove_devices() {
    local path
    [[ -f $RUN/devices ]] || return 0
    while read -r path; do
        [[ $path == /dev/mkhgpu_* && -c $path ]] && rm -f "$path"
    done <"$RUN/devices"
    rm -f "$RUN/devices"
}
# /etc/slurm/slurm.conf -> our slurm.conf, when no system config exists. Needed for Snakemake: inside each
# job, snakemake-executor-plugin-slurm-jobstep (0.6.1) strips every SLURM_* variable, SLURM_CONF included,
# before it calls srun, so srun reads /etc/slurm/slurm.conf. Removed again by `down`.
ETC_LINK=/etc/slurm/slurm.conf
link_etc() {
    [[ ${MKH_SLURM_LINK_ETC:-1} == 1 ]] || { say "etc: not linking $ETC_LINK (MKH_SLURM_LINK_ETC=0)"; return 0; }
    if [[ -L $ETC_LINK && $(readlink "$ETC_LINK") == "$CONF" ]]; then
        return 0
    elif [[ -e $ETC_LINK || -L $ETC_LINK ]]; then
        say "WARNING: $ETC_LINK exists and is not ours: sbatch/sacct here need SLURM_CONF=$CONF, and" \
            "srun inside Snakemake jobs (which drop SLURM_CONF) will talk to the cluster of $ETC_LINK."
        return 0
    fi
    mkdir -p "$(dirname "$ETC_LINK")"
    ln -s "$CONF" "$ETC_LINK"
    echo "$ETC_LINK" >"$RUN/etc-link"
    say "etc: linked $ETC_LINK -> $CONF (srun inside Snakemake jobs reads it)"
}
unlink_etc() {
    if [[ -f $RUN/etc-link && -L $ETC_LINK && $(readlink "$ETC_LINK") == "$CONF" ]]; then
        rm -f "$ETC_LINK"
        say "etc: removed the link $ETC_LINK"
    fi
    rm -f "$RUN/etc-link"
}
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
check_port() { # check_port PORT DAEMON VARIABLE
    port_free "$1" || die "port $1 (for $2) is already in use by another program" \
        "stop that program, or pick another port: $3=<port> bash job-scripts/cluster.sh up"
}

# --- daemons ---
start_munge() {
    if alive munged; then say "munged: up (pid $(pid_of munged))"; return 0; fi
    if [[ ! -s $ETC/munge.key ]]; then
        say "munge: creating key $ETC/munge.key"
        (umask 077 && dd if=/dev/urandom of="$ETC/munge.key" bs=1024 count=1 status=none)
    fi
    chmod 400 "$ETC/munge.key"
    rm -f "$RUN/munge.socket" "$RUN/munge.socket.lock"
    say "munged: starting (socket $RUN/munge.socket)"
    munged --force --key-file="$ETC/munge.key" --socket="$RUN/munge.socket" --pid-file="$RUN/munged.pid" \
        --log-file="$LOG/munged.log" --seed-file="$STATE/munge.seed" </dev/null >>"$LOG/munged.out" 2>&1 ||
        { log_tail "$LOG/munged.log"; die "munged failed to start" "see $LOG/munged.log"; }
    wait_for 20 munge bash -c "munge -n -S '$RUN/munge.socket' | unmunge -S '$RUN/munge.socket'" ||
        { log_tail "$LOG/munged.log"; die "munge credentials do not round-trip through $RUN/munge.socket" "see $LOG/munged.log"; }
    say "munged: up (pid $(pid_of munged))"
}
sql() { mariadb --no-defaults --socket="$RUN/mysqld.sock" -u root -N -B -e "$1"; }
start_mariadb() {
    if alive mariadbd; then say "mariadbd: up (pid $(pid_of mariadbd))"; return 0; fi
    check_port "$DB_PORT" mariadbd MKH_SLURM_DB_PORT
    if [[ ! -d $STATE/mysql/mysql ]]; then
        say "mariadb: initialising data directory $STATE/mysql"
        mariadb-install-db --no-defaults --user=root --datadir="$STATE/mysql" --auth-root-authentication-method=socket \
            --skip-test-db >"$LOG/mariadb-install.log" 2>&1 ||
            { log_tail "$LOG/mariadb-install.log"; die "mariadb-install-db failed" "see $LOG/mariadb-install.log"; }
    fi
    say "mariadbd: starting (127.0.0.1:$DB_PORT, socket $RUN/mysqld.sock)"
    setsid mariadbd --no-defaults --user=root --datadir="$STATE/mysql" --socket="$RUN/mysqld.sock" \
        --port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$RUN/mariadbd.pid" --log-error="$LOG/mariadb.log" \
        --innodb-buffer-pool-size=268435456 --innodb-log-file-size=67108864 --innodb-lock-wait-timeout=900 </dev/null >>"$LOG/mariadb.out" 2>&1 &
    wait_for 60 mariadb mariadb-admin --no-defaults --socket="$RUN/mysqld.sock" -u root ping ||
        { log_tail "$LOG/mariadb.log"; die "mariadbd did not answer within 60 s" "see $LOG/mariadb.log"; }
    wait_for 10 "mariadb pid file" alive mariadbd || die "mariadbd pid file $RUN/mariadbd.pid missing" "see $LOG/mariadb.log"
    local pass
    pass=$(cat "$ETC/db.pass")
    sql "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
         CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
         CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pass';
         ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
         ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$pass';
         GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
         GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
         FLUSH PRIVILEGES;" || die "could not create the slurm_acct_db database and user" "see $LOG/mariadb.log"
    say "mariadbd: up (pid $(pid_of mariadbd)), database slurm_acct_db, user slurm"
}
start_slurmdbd() {
    if alive slurmdbd; then say "slurmdbd: up (pid $(pid_of slurmdbd))"; return 0; fi
    check_port "$DBD_PORT" slurmdbd MKH_SLURM_DBD_PORT
    say "slurmdbd: starting (127.0.0.1:$DBD_PORT)"
    # slurmdbd finds slurmdbd.conf next to $SLURM_CONF
    SLURM_CONF=$CONF slurmdbd </dev/null >>"$LOG/slurmdbd.out" 2>&1 ||
        { log_tail "$LOG/slurmdbd.log"; die "slurmdbd failed to start" "see $LOG/slurmdbd.log"; }
    wait_for 90 slurmdbd sacctmgr -n show cluster ||
        { log_tail "$LOG/slurmdbd.log"; die "slurmdbd did not answer sacctmgr within 90 s" "see $LOG/slurmdbd.log"; }
    say "slurmdbd: up (pid $(pid_of slurmdbd))"
}
ensure_cluster_registered() {
    if [[ -z $(sacctmgr -nP show cluster "$CLUSTER" format=cluster) ]]; then
        say "sacctmgr: adding cluster $CLUSTER"
        sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr add cluster $CLUSTER failed" "see $LOG/slurmdbd.log"
    fi
}
start_slurmctld() {
    local restart=$1
    if alive slurmctld && [[ -z $restart ]]; then say "slurmctld: up (pid $(pid_of slurmctld))"; return 0; fi
    alive slurmctld && { say "slurmctld: configuration changed, restarting"; stop_daemon slurmctld; }
    check_port "$CTLD_PORT" slurmctld MKH_SLURM_CTLD_PORT
    say "slurmctld: starting (127.0.0.1:$CTLD_PORT)"
    slurmctld -f "$CONF" </dev/null >>"$LOG/slurmctld.out" 2>&1 ||
        { log_tail "$LOG/slurmctld.log"; die "slurmctld failed to start" "see $LOG/slurmctld.log"; }
    wait_for 60 slurmctld scontrol ping ||
        { log_tail "$LOG/slurmctld.log"; die "slurmctld did not answer scontrol ping within 60 s" "see $LOG/slurmctld.log"; }
    say "slurmctld: up (pid $(pid_of slurmctld))"
}
node_state() { sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -n 1; }
node_ready() { [[ $(node_state) =~ ^(idle|mixed|allocated|completing) ]]; }
start_slurmd() {
    local restart=$1
    if alive slurmd && [[ -z $restart ]]; then say "slurmd: up (pid $(pid_of slurmd))"; return 0; fi
    alive slurmd && { say "slurmd: configuration changed, restarting"; stop_daemon slurmd; }
    check_port "$SLURMD_PORT" slurmd MKH_SLURM_SLURMD_PORT
    say "slurmd: starting node $NODE"
    SLURM_CONF=$CONF slurmd -f "$CONF" -N "$NODE" </dev/null >>"$LOG/slurmd.out" 2>&1 ||
        { log_tail "$LOG/slurmd.log"; die "slurmd failed to start" "see $LOG/slurmd.log"; }
    if ! wait_for 30 "node $NODE" node_ready; then
        say "node $NODE is '$(node_state)'; resuming it"
        scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
        wait_for 30 "node $NODE" node_ready ||
            { log_tail "$LOG/slurmd.log"; log_tail "$LOG/slurmctld.log"
              die "node $NODE is '$(node_state)', not idle" "see $LOG/slurmd.log; scontrol show node $NODE"; }
    fi
    say "slurmd: up (pid $(pid_of slurmd)), node $NODE $(node_state)"
}
ensure_associations() {
    if [[ -z $(sacctmgr -nP show account "$ACCOUNT" format=account) ]]; then
        say "sacctmgr: adding account $ACCOUNT"
        sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description="megakernel-hybrid" Organization=mkh >/dev/null ||
            die "sacctmgr add account $ACCOUNT failed" "see $LOG/slurmdbd.log"
    fi
    local u
    for u in $USERS; do
        id "$u" >/dev/null 2>&1 || die "user '$u' (MKH_SLURM_USERS) does not exist on this box" "set MKH_SLURM_USERS to existing users"
        if [[ -z $(sacctmgr -nP show assoc cluster="$CLUSTER" account="$ACCOUNT" user="$u" format=user) ]]; then
            say "sacctmgr: adding user $u to account $ACCOUNT"
            sacctmgr -i add user "$u" Account="$ACCOUNT" Cluster="$CLUSTER" >/dev/null ||
                die "sacctmgr add user $u failed" "see $LOG/slurmdbd.log"
        fi
        sacctmgr -i modify user "$u" set DefaultAccount="$ACCOUNT" >/dev/null 2>&1 || true
    done
}
all_up() {
    local d
    for d in "${DAEMONS[@]}"; do alive "$d" || return 1; done
    SLURM_CONF=$CONF node_ready
}
print_env() { echo "export SLURM_CONF=$CONF"; }

cmd_up() {
    need_root up
    install_packages
    export PATH=$PATH:/usr/sbin:/sbin
    find_python || die "python with PyYAML not found" "apt-get install python3-yaml"
    generate_configs
    local changed
    changed=$(install_configs)
    export SLURM_CONF=$CONF
    link_etc
    if [[ -z $changed ]] && all_up; then
        say "cluster '$CLUSTER' is already up (node $NODE $(node_state)); nothing to do"
    else
        [[ -n $changed ]] && say "config: wrote $(echo $changed) in $ETC"
        local restart=
        [[ $changed == *slurm.conf* || $changed == *gres.conf* ]] && restart=1
        touch "$STATE/.mkh-slurm"
        make_devices
        start_munge
        start_mariadb
        [[ $changed == *slurmdbd.conf* ]] && alive slurmdbd && { say "slurmdbd: configuration changed, restarting"; stop_daemon slurmdbd; }
        start_slurmdbd
        ensure_cluster_registered
        start_slurmctld "$restart"
        start_slurmd "$restart"
        ensure_associations
        say "cluster '$CLUSTER' is up: account $ACCOUNT, users $(echo $USERS), partitions:"
    fi
    sinfo -o '%P %a %D %T %G' | sed 's/^/    /' >&2
    say "account: $ACCOUNT   (slurm_account / sbatch --account)"
    say "use it from a shell with: $(print_env)"
    print_env
}
cmd_down() {
    need_root down
    export PATH=$PATH:/usr/sbin:/sbin SLURM_CONF=$CONF
    if [[ ! -d $RUN ]]; then say "nothing to stop: $RUN does not exist"; return 0; fi
    if alive slurmctld && command -v squeue >/dev/null; then
        local jobs
        jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
        if [[ -n ${jobs// /} ]]; then
            say "cancelling jobs still in the queue: $jobs"
            # shellcheck disable=SC2086
            scancel $jobs 2>/dev/null || true
            wait_for 30 "queue to drain" bash -c '[[ -z $(squeue -h -o %i) ]]' || say "jobs still listed after 30 s; stopping anyway"
        fi
    fi
    local i
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do stop_daemon "${DAEMONS[i]}"; done
    remove_devices
    unlink_etc
    say "cluster '$CLUSTER' is down (state kept in $STATE; 'purge' deletes it)"
}
cmd_purge() {
    need_root purge
    cmd_down
    if [[ -d $STATE ]]; then
        [[ -f $STATE/.mkh-slurm ]] || die "$STATE has no .mkh-slurm marker; not deleting a directory this script did not create" \
            "delete it yourself if it is really ours"
        rm -rf "$STATE"
        say "deleted $STATE"
    fi
}
cmd_status() {
    export PATH=$PATH:/usr/sbin:/sbin SLURM_CONF=$CONF
    local d ok=0
    say "state directory: $STATE"
    for d in "${DAEMONS[@]}"; do
        if alive "$d"; then say "$(printf '%-10s up (pid %s)' "$d" "$(pid_of "$d")")"; else say "$(printf '%-10s down' "$d")"; ok=1; fi
    done
    if alive slurmctld; then
        sinfo -o '%P %a %D %T %G' 2>&1 | sed 's/^/    /' >&2 || true
        alive slurmdbd && sacctmgr -nP show assoc format=cluster,account,user 2>&1 | sed 's/^/    assoc /' >&2 || true
    fi
    all_up || ok=1
    if [[ ${MKH_SLURM_LINK_ETC:-1} == 1 ]] && ! [[ -L $ETC_LINK && $(readlink "$ETC_LINK") == "$CONF" ]]; then
        say "$ETC_LINK does not point to $CONF: srun inside Snakemake jobs will not find this cluster"
    fi
    if ((ok == 0)); then say "cluster '$CLUSTER' is up; $(print_env)"; else say "cluster '$CLUSTER' is not (fully) up; start it with: sudo bash job-scripts/cluster.sh up"; fi
    return $ok
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
purge) cmd_purge ;;
status) cmd_status ;;
env) print_env ;;
*)
    echo "usage: $0 {up|down|status|env|purge}   (see the header of this file)" >&2
    exit 2
    ;;
esac
