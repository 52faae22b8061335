#!/usr/bin/env python3
"""Holds the Python package's copies of the C ABI's codes to bindings/c/ringfold.h.

The `ringfold` package declares the dtype, operation-type, device and status codes by hand in
ringfold/_lib.py (and Horovod's reduce ops as Average ... Product in ringfold/basics.py), since
ctypes cannot read a header. This test parses both sides without importing anything (plain
python3: no numpy, no torch, no built library) and fails naming every code that differs or is
missing on either side:
  * every integer `#define RINGFOLD_<NAME>` of the header, and Horovod's process-set results
    `HOROVOD_PROCESS_SET_ERROR_<X>` (read as RINGFOLD_PROCESS_SET_ERROR_<X>), but for NOT_IN_PYTHON,
    must be `<NAME>` in _lib.py, or in basics.py for RINGFOLD_OP_*, with the same value;
  * every upper-case integer constant of _lib.py must be such a define;
  * DTYPE_NAMES and DTYPE_SIZES have one entry per dtype code.

Usage: python_codes_test.py [REPO_ROOT]   (default: three directories above this file)
"""
import ast
import os
import re
import sys

# Header codes the package has no name for, on purpose.
NOT_IN_PYTHON = {
    'RINGFOLD_ABI_VERSION': 'the version of the header itself',
}
REDUCE_OPS = {'AVERAGE': 'Average', 'SUM': 'Sum', 'ADASUM': 'Adasum', 'MIN': 'Min', 'MAX': 'Max',
              'PRODUCT': 'Product'}
DTYPES = ('INT8', 'UINT8', 'INT32', 'UINT32', 'INT64', 'UINT64', 'FLOAT16', 'FLOAT32', 'FLOAT64',
          'BFLOAT16', 'BOOL', 'FLOAT8_E4M3', 'FLOAT8_E5M2')


def header_codes(path):
    """{name: value} of every `#define RINGFOLD_X <integer>` (also `(-1)`), and of Horovod's
    process-set results `HOROVOD_PROCESS_SET_ERROR_X`, named RINGFOLD_PROCESS_SET_ERROR_X here."""
    codes = {}
    pattern = re.compile(r'^\s*#\s*define\s+((?:RINGFOLD|HOROVOD_PROCESS_SET_ERROR)_\w+)\s+\(?\s*(-?\s*\d+)\s*\)?\s*'
                         r'(?:/\*.*)?$')
    with open(path) as f:
        for line in f:
            m = pattern.match(line)
            if m:
                codes[m.group(1).replace('HOROVOD_', 'RINGFOLD_', 1)] = int(m.group(2).replace(' ', ''))
    return codes


def module_constants(path):
    """{name: value} of the module-level assignments of integer constants, including tuple
    unpacking (`A, B = 0, 1` and `A, B = range(2)`); other values (tuples, strings) by name too."""
    values = {}
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == 'range'):
            evaluated = list(range(*[ast.literal_eval(a) for a in value.args]))
        else:
            try:
                evaluated = ast.literal_eval(value)
            except ValueError:
                continue
        if isinstance(target, ast.Name):
            values[target.id] = evaluated
        elif isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
            if len(target.elts) != len(evaluated):
                raise SystemExit('%s: %d names but %d values in line %d'
                                 % (path, len(target.elts), len(evaluated), node.lineno))
            for e, v in zip(target.elts, evaluated):
                values[e.id] = v
    return values


def compare(root):
    header_path = os.path.join(root, 'bindings', 'c', 'ringfold.h')
    lib_path = os.path.join(root, 'bindings', 'python', 'ringfold', '_lib.py')
    basics_path = os.path.join(root, 'bindings', 'python', 'ringfold', 'basics.py')
    header = header_codes(header_path)
    lib = module_constants(lib_path)
    basics = module_constants(basics_path)
    problems = []
    if len(header) < 30:
        problems.append('only %d RINGFOLD_* codes found in %s: the parser no longer reads it'
                        % (len(header), header_path))
    for name, value in sorted(header.items()):
        if name in NOT_IN_PYTHON:
            continue
        short = name[len('RINGFOLD_'):]
        if short.startswith('OP_'):
            where, py_name = basics, REDUCE_OPS.get(short[3:])
            file_name = 'basics.py'
        else:
            where, py_name, file_name = lib, short, '_lib.py'
        if py_name is None or py_name not in where:
            problems.append('%s (%d) is missing from %s%s' % (name, value, file_name,
                                                              ' as ' + py_name if py_name else ''))
        elif where[py_name] != value:
            problems.append('%s is %d in ringfold.h but %s is %r in %s'
                            % (name, value, py_name, where[py_name], file_name))
    for py_name, value in sorted(lib.items()):
        if py_name.isupper() and isinstance(value, int) and not isinstance(value, bool):
            if 'RINGFOLD_' + py_name not in header:
                problems.append('_lib.%s (%d) has no RINGFOLD_%s in ringfold.h' % (py_name, value, py_name))
    for py_name, value in sorted(basics.items()):
        if py_name in REDUCE_OPS.values():
            code = {v: k for k, v in REDUCE_OPS.items()}[py_name]
            if 'RINGFOLD_OP_' + code not in header:
                problems.append('basics.%s (%d) has no RINGFOLD_OP_%s in ringfold.h' % (py_name, value, code))
    dtype_count = sum(1 for d in DTYPES if 'RINGFOLD_' + d in header)
    if dtype_count != max(header.get('RINGFOLD_' + d, -1) for d in DTYPES) + 1:
        problems.append('the dtype codes of ringfold.h are not 0..%d' % (dtype_count - 1))
    for table in ('DTYPE_NAMES', 'DTYPE_SIZES'):
        if len(lib.get(table, ())) != dtype_count:
            problems.append('_lib.%s has %d entries for %d dtype codes'
                            % (table, len(lib.get(table, ())), dtype_count))
    return header, problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.abspath(
        os.path.join(os.path.dirname(__file__), '..', '..'))
    header, problems = compare(root)
    if problems:
        print('The Python package and bindings/c/ringfold.h disagree:')
        for p in problems:
            print('  ' + p)
        return 1
    print('ok: %d codes of ringfold.h match the Python package' % (len(header) - len(NOT_IN_PYTHON)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
