# The sandbox's trusted launcher (ragen2_envs.sandbox reads this file as text; never imported).
# Run as ``python -I -S -c <this text> CONFIG.json`` with the caller's privileges (root or
# namespace root): it joins the run's cgroup, remounts the filesystem read-only with private
# tmpfs and hidden folders (with namespaces), writes the job, forks the runner under rlimits,
# a uid of its own, no capabilities and no_new_privs, waits for it as its parent and reports
# on the status pipe: N notes, K runner about to start, P pid, X status cpu_s maxrss, E error.
# Standard library only; it must run under -I -S.
import os, sys, json, ctypes, resource, time
cfg = None
def report(text):
    try:
        os.write(cfg["status_fd"], (text.replace("\n", " ") + "\n").encode("utf-8", "replace")[:2000])
    except Exception:
        pass
def main():
    global cfg
    with open(sys.argv[1], "rb") as fh:
        cfg = json.loads(fh.read())
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    def enc(s):
        return None if s is None else s.encode()
    def mount(src, dst, fstype, flags, data):
        if libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)) != 0:
            e = ctypes.get_errno()
            raise OSError(e, "mount %s: %s" % (dst, os.strerror(e)))
    def prctl(op, arg):
        if libc.prctl(op, arg, 0, 0, 0) != 0:
            e = ctypes.get_errno()
            raise OSError(e, "prctl %d: %s" % (op, os.strerror(e)))
    for procs in cfg["cgroup_procs"]:
        with open(procs, "w") as fh:
            fh.write("0")
    work, python, env = cfg["workdir"], cfg["runner_python"], dict(cfg["env"])
    notes = []
    if cfg["mount"]:
        RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC = 1, 2, 4, 8, 32, 4096, 16384
        KEEP = 1 | 2 | 4 | 8 | 1024 | 2048 | 4096
        points = []
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                mp = line.split()[4]
                mp = mp.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
                if mp not in points:
                    points.append(mp)
        for mp in points:
            try:
                flags = os.statvfs(mp).f_flag & KEEP
                mount(None, mp, None, REMOUNT | BIND | RDONLY | flags, None)
            except OSError as e:
                if mp == "/":
                    raise
                notes.append("ro:%s" % mp)
        size = cfg["tmpfs_mb"]
        for d in cfg["tmpfs"]:
            if os.path.isdir(d) and not os.path.islink(d):
                mount("tmpfs", d, "tmpfs", NOSUID | NODEV, "size=%dm,nr_inodes=4096,mode=1777" % size)
        prefix = cfg["python_prefix"]
        if prefix:
            target = "/tmp/.python"
            os.mkdir(target, 0o755)
            mount(prefix, target, None, BIND | REC, None)
            mount(None, target, None, REMOUNT | BIND | RDONLY | NOSUID | NODEV, None)
            python = target + "/" + cfg["python_rel"]
            env["LD_LIBRARY_PATH"] = target + "/lib"
        for d in cfg["hide"]:
            targets = [d]
            if prefix and (d + "/").startswith(prefix.rstrip("/") + "/"):
                targets.append("/tmp/.python" + d[len(prefix.rstrip("/")):])
            for t in targets:
                if os.path.isdir(t) and not os.path.islink(t):
                    try:
                        mount("tmpfs", t, "tmpfs", RDONLY | NOSUID | NODEV | NOEXEC, "size=4k,nr_inodes=4,mode=555")
                    except OSError:
                        notes.append("hide:%s" % t)
        work = "/tmp/work"
        os.mkdir(work, 0o700)
    uid, gid = cfg["uid"], cfg["gid"]
    job_path = os.path.join(work, "job.json")
    with open(job_path, "w") as fh:
        json.dump(cfg["job"], fh)
    if uid is not None:
        os.chown(work, uid, gid)
        os.chown(job_path, uid, gid)
    if notes:
        report("N " + " ".join(notes))
    prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans of the run become our children
    pid = os.fork()
    if pid == 0:
        try:
            for name, soft, hard in cfg["rlimits"]:
                resource.setrlimit(getattr(resource, name), (soft, hard))
            if cfg["drop_bounding"]:
                with open("/proc/sys/kernel/cap_last_cap") as fh:
                    last = int(fh.read())
                for cap in range(last + 1):
                    prctl(24, cap)  # PR_CAPBSET_DROP
            if uid is not None:
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
            prctl(38, 1)  # PR_SET_NO_NEW_PRIVS
            prctl(1, 9)  # PR_SET_PDEATHSIG = SIGKILL (after the uid change, which clears it)
            os.chdir(work)
            env["HOME"] = work
            env["TMPDIR"] = "/tmp" if cfg["mount"] else work
            report("K")
            os.close(cfg["status_fd"])
            os.execve(python, [python, "-I", "-S", "-B", "-c", cfg["runner"], "job.json"], env)
        except BaseException as e:
            report("E runner setup failed: %s: %s" % (type(e).__name__, e))
            os._exit(121)
    report("P %d" % pid)
    while True:
        try:
            got, status, ru = os.wait4(-1, 0)
        except ChildProcessError:
            break
        if got == pid:
            report("X %d %.6f %d" % (status, ru.ru_utime + ru.ru_stime, ru.ru_maxrss))
            break
    if cfg["mount"]:
        return  # we are the pid namespace's init: our exit kills whatever is left
    # No pid namespace: kill and reap what the run left (orphans are re-parented to us).
    me = os.getpid()
    for _ in range(2000):
        try:
            while os.wait4(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            break
        try:
            with open("/proc/%d/task/%d/children" % (me, me)) as fh:
                kids = [int(x) for x in fh.read().split()]
        except (OSError, ValueError):
            kids = []
        for kid in kids:
            try:
                os.kill(kid, 9)
            except OSError:
                pass
        time.sleep(0.001)
try:
    main()
except BaseException as e:
    report("E launcher setup failed: %s: %s" % (type(e).__name__, e))
    os._exit(121)
os._exit(0)
