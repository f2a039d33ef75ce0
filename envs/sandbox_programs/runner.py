# The sandbox's runner (ragen2_envs.sandbox reads this file as text; never imported).
# Run as ``python -I -S -B -c <this text> job.json`` as the unprivileged child: loads the
# untrusted source, then calls the function on each literal input and writes one line per
# result, ``<marker> <kind> <json>``, to the original stdout. It decides no verdict: values go
# back as the repr of plain literal data, which the parent decodes and compares.
# Standard library only; it must run under -I -S.
import os, sys, json
from ast import literal_eval
def _main():
    with open(sys.argv[1], "rb") as fh:
        job = json.loads(fh.read())
    try:
        os.unlink(sys.argv[1])
    except OSError:
        pass
    marker, out, dumps = job["marker"], os.dup(1), json.dumps
    def emit(kind, obj):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        data = ("\n%s %s %s\n" % (marker, kind, dumps(obj))).encode()
        while data:
            data = data[os.write(out, data):]
    def describe(e):
        try:
            text = "%s: %s" % (type(e).__name__, e)
        except BaseException:
            text = type(e).__name__
        return text if len(text) <= 500 else text[:497] + "..."
    ATOMS = (type(None), bool, int, float, str)
    def check(v, depth, count):
        t = type(v)
        count[0] += 1
        if count[0] > 100000:
            raise ValueError("return value too large")
        if t in ATOMS:
            return
        if depth > 50:
            raise ValueError("return value nested too deeply")
        if t is list or t is tuple or t is set:
            for x in v:
                check(x, depth + 1, count)
        elif t is dict:
            for k, x in v.items():
                check(k, depth + 1, count)
                check(x, depth + 1, count)
        else:
            raise TypeError("unsupported return type %s (return plain data: None, bool, int, float, str, list, tuple, dict, set)" % t.__name__)
    def encode(v):
        check(v, 0, [0])
        text = repr(v)
        if len(text) > 20000:
            raise ValueError("return value too large (%d characters)" % len(text))
        return text
    function, mode = job["function"], "__main__" if job["function"] is None else "solution"
    g = {"__name__": mode, "__builtins__": __builtins__}
    try:
        exec(compile(job["source"], "<solution>", "exec"), g)
    except SystemExit as e:
        if function is not None or e.code not in (None, 0):
            emit("load", {"error": describe(e)})
            emit("done", {})
            os._exit(0)
    except BaseException as e:
        emit("load", {"error": describe(e)})
        emit("done", {})
        os._exit(0)
    if function is None:
        emit("load", {})
        emit("done", {})
        os._exit(0)
    fn = g.get(function)
    if not callable(fn):
        emit("load", {"error": "NameError: function %r is not defined" % function, "missing": True})
        emit("done", {})
        os._exit(0)
    emit("load", {})
    for i, call in enumerate(job["calls"]):
        try:
            value = encode(fn(*literal_eval(call)))
        except BaseException as e:
            emit("call", {"i": i, "error": describe(e)})
        else:
            emit("call", {"i": i, "value": value})
    emit("done", {})
    os._exit(0)
_main()
