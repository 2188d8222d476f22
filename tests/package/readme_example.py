#!/usr/bin/env python3
"""readme_example.py README HELLO_C - the README's C code block is examples/c/hello.c.

The first ```c block of README.md must equal the file byte for byte, so the program
users copy from the README is the one the tests build and run. Prints the first
differing line and exits 1 otherwise.
"""
import sys

readme, example = sys.argv[1], sys.argv[2]
text = open(readme, encoding="utf-8").read()
start = text.find("```c\n")
if start < 0:
    print("FAIL: no ```c block in %s" % readme)
    sys.exit(1)
end = text.find("```\n", start + 5)
block = text[start + 5:end]
code = open(example, encoding="utf-8").read()
if block == code:
    print("ok: the README's C block is %s (%d lines)" % (example, code.count("\n")))
    sys.exit(0)
a, b = block.splitlines(), code.splitlines()
for i in range(max(len(a), len(b))):
    la = a[i] if i < len(a) else "<end>"
    lb = b[i] if i < len(b) else "<end>"
    if la != lb:
        print("FAIL: line %d differs:\n  README:  %r\n  example: %r" % (i + 1, la, lb))
        break
sys.exit(1)
