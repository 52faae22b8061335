"""Shared by the Python benchmarks: where `ringfoldrun` is."""
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_launcher(path):
    """`path` if given, else build/ringfoldrun of this checkout, else `ringfoldrun` on PATH."""
    if path:
        return path
    built = os.path.join(ROOT, 'build', 'ringfoldrun')
    if os.path.isfile(built):
        return built
    found = shutil.which('ringfoldrun')
    if not found:
        sys.exit('ringfoldrun not found: pass --ringfoldrun')
    return found
