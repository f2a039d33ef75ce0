# The sandbox's probe program (ragen2_envs.sandbox reads this file as text and runs it in the
# sandbox like untrusted code): reports which isolation layers took effect, as one line
# ``PROBE <json>`` (uid, pid, network interfaces, writable / and cwd, what /tmp holds).
import os, json
facts = {"uid": os.getuid(), "pid": os.getpid()}
try:
    with open("/proc/net/dev") as fh:
        facts["ifaces"] = sorted(l.split(":")[0].strip() for l in fh.readlines()[2:])
except OSError:
    facts["ifaces"] = None
def writable(path):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return False
    os.close(fd)
    os.unlink(path)
    return True
facts["root_writable"] = writable("/.ragen2-probe-%d" % os.getpid())
facts["tmp"] = sorted(os.listdir("/tmp"))
facts["cwd_writable"] = writable("probe-file")
print("PROBE " + json.dumps(facts))
