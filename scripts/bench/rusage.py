#!/usr/bin/env python3
# Runs commands as helm runs a post-renderer: stdin a pipe fed with the content
# of an input file (or empty), stdout a pipe read to the end (and saved to an
# output file if asked). Reports per run: exit code, wall time, and the
# child's own CPU time (user, sys) and peak RSS from wait4(2): exact, per
# child (including the child's own waited-for children), in microseconds.
# Used by scripts/bench.mjs.
#
#   rusage.py INPUT_FILE|- OUTPUT_FILE|- CMD [ARGS...]     one run, one JSON line
#   rusage.py --serve     a JSON request per stdin line ({argv, input, output,
#                         env, cwd}), a JSON answer per stdout line: no Python
#                         start-up per measurement
import json, os, sys, threading, time


def run(argv, input_file=None, output_file=None, env=None, cwd=None):
    data = b'' if not input_file else open(input_file, 'rb').read()
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(in_r, 0)
            os.dup2(out_w, 1)
            for fd in (in_r, in_w, out_r, out_w):
                os.close(fd)
            if cwd:
                os.chdir(cwd)
            if env is None:
                os.execvp(argv[0], argv)
            else:
                os.execvpe(argv[0], argv, env)
        finally:
            os._exit(127)
    os.close(in_r)
    os.close(out_w)

    def feed():
        try:
            view = memoryview(data)
            while view:
                n = os.write(in_w, view[:1 << 20])
                view = view[n:]
        except BrokenPipeError:
            pass
        finally:
            os.close(in_w)

    writer = threading.Thread(target=feed)
    writer.start()
    chunks = []
    size = 0
    while True:
        chunk = os.read(out_r, 1 << 20)
        if not chunk:
            break
        size += len(chunk)
        if output_file:
            chunks.append(chunk)
    os.close(out_r)
    writer.join()
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if output_file:
        with open(output_file, 'wb') as f:
            f.write(b''.join(chunks))
    return {'code': os.waitstatus_to_exitcode(status), 'wall': wall * 1000, 'user': ru.ru_utime * 1000,
            'sys': ru.ru_stime * 1000, 'maxrss': ru.ru_maxrss * 1024, 'out': size}


if sys.argv[1:2] == ['--serve']:
    for line in sys.stdin:
        req = json.loads(line)
        try:
            res = run(req['argv'], req.get('input'), req.get('output'), req.get('env'), req.get('cwd'))
        except Exception as e:  # answered, not raised: the bench reports it
            res = {'error': str(e)}
        sys.stdout.write(json.dumps(res) + '\n')
        sys.stdout.flush()
else:
    i, o = sys.argv[1], sys.argv[2]
    print(json.dumps(run(sys.argv[3:], None if i == '-' else i, None if o == '-' else o)))
