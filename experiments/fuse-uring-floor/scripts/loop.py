import os, sys, time
p = sys.argv[1] + "/f"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
t = time.perf_counter()
for _ in range(n):
    try: os.getxattr(p, "security.capability")
    except OSError: pass
print("%.2f" % ((time.perf_counter() - t) / n * 1e6))
