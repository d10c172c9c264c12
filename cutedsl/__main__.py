import os
import sys

from .cli import main

try:
    status = main()
    sys.stdout.flush()              # a reader that went away (``| head -3``) shows up here
except BrokenPipeError:
    # Not an error of ours: end quietly like a tool killed by SIGPIPE. stdout now points at
    # /dev/null so the interpreter's final flush cannot raise again.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    status = 128 + 13
sys.exit(status)
