#!/usr/bin/env python3
# Runs one command as helm runs a post-renderer: stdin a pipe fed with the
# content of INPUT_FILE (or empty for -), stdout a pipe read to the end (and
# saved to OUTPUT_FILE unless -). Prints one JSON line on stdout: exit code,
# wall time, and the child's own CPU time (user, sys) and peak RSS from
# wait4(2): exact, per child, in microseconds. Used by scripts/bench.mjs.
#   rusage.py INPUT_FILE|- OUTPUT_FILE|- CMD [ARGS...]
import json, os, sys, threading, time

input_file, output_file, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
data = b'' if input_file == '-' else open(input_file, 'rb').read()
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
        os.execvp(argv[0], argv)
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
    if output_file != '-':
        chunks.append(chunk)
os.close(out_r)
writer.join()
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
if output_file != '-':
    with open(output_file, 'wb') as f:
        f.write(b''.join(chunks))
print(json.dumps({'code': os.waitstatus_to_exitcode(status), 'wall': wall * 1000, 'user': ru.ru_utime * 1000,
                  'sys': ru.ru_stime * 1000, 'maxrss': ru.ru_maxrss * 1024, 'out': size}))
