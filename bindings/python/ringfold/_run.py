"""The `ringfoldrun` console script: runs the launcher binary shipped in this package
(ringfold/bin/ringfoldrun) with the same arguments; see `ringfoldrun --help`."""
import os
import sys


def main():
    binary = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'bin', 'ringfoldrun')
    if not os.access(binary, os.X_OK):
        sys.exit('ringfoldrun: %s is missing; reinstall ringfold with `pip install .`' % binary)
    os.execv(binary, [binary] + sys.argv[1:])


if __name__ == '__main__':
    main()
