#!/usr/bin/env python3
"""Usage: python3 scripts/fn_lengths.py [--min N] [--no-tests] DIR_OR_FILE...

Prints Rust fn items by length in lines, longest first: length, name, file:line. A length
counts from the `fn` line to its closing brace; braces in strings (raw and byte strings
too), chars and comments are ignored, and closures and nested items count toward the
function holding them.

--min N     only functions of at least N lines
--no-tests  leave out files under a `tests` directory and `#[cfg(test)]` (or
            `#[cfg(all(test, …))]`) modules"""
import os, re, signal, sys

FN_RE = re.compile(r'\bfn\s+([A-Za-z_][A-Za-z0-9_]*)')
RAW_RE = re.compile(r'[bc]?r(#*)"')
TEST_MOD_RE = re.compile(r'#\[cfg\((?:test|all\(test\b[^)]*\))\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{')


def strip_code(text):
    """Returns text with comments, strings and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif text.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith('/*', j): depth += 1; j += 2
                elif text.startswith('*/', j): depth -= 1; j += 2
                else: j += 1
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif c in 'brc' and RAW_RE.match(text, i) and (i == 0 or not (text[i-1].isalnum() or text[i-1] == '_')):
            # r"…", r#"…"#, and the byte and C string forms br"…", cr"…": no escapes inside
            m = RAW_RE.match(text, i)
            end = '"' + m.group(1)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            j += 1
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif c == "'":
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|\\x..|[^\\'])'", text[i:])
            if m:
                out.append(' ' * m.end()); i += m.end()
            else:  # a lifetime
                out.append(c); i += 1
        else:
            out.append(c); i += 1
    return ''.join(out)


def matching_brace(code, j):
    """The index of the '}' that closes the '{' at j."""
    depth, k = 0, j
    while k < len(code):
        if code[k] == '{': depth += 1
        elif code[k] == '}':
            depth -= 1
            if depth == 0: break
        k += 1
    return k


def body_start(code, j):
    """The index of the body's '{' of the fn whose signature starts at j, or -1 when a ';'
    ends it first (a declaration without body). Brackets nest: () [] and, outside them, the
    generics' <>; a '{' inside any of them is a const expression, not the body. Not brackets:
    the '>' of '->' and '=>', a comparison's '<=' '>=', and '<<' '>>' with space on both sides
    (a shift, as rustfmt writes it; `Vec<Vec<u8>>` closes two generics). Inside () and [] the
    angle brackets are not counted at all (`[u8; 1 << 4]`, `x: Vec<u8>`)."""
    nest = angle = 0
    while j < len(code):
        ch, two = code[j], code[j:j + 2]
        if two in ('->', '=>', '<=', '>='):
            j += 2; continue
        if two in ('<<', '>>') and code[j - 1:j].isspace() and code[j + 2:j + 3].isspace():
            j += 2; continue
        if ch in '([': nest += 1
        elif ch in ')]': nest -= 1
        elif ch == '<' and nest == 0: angle += 1
        elif ch == '>' and nest == 0: angle -= 1
        elif ch == ';' and nest <= 0 and angle <= 0: return -1
        elif ch == '{':
            if nest <= 0 and angle <= 0: return j
            j = matching_brace(code, j)
        j += 1
    return -1


def test_spans(code):
    """(start, end) of every `#[cfg(test)]` module's body."""
    return [(m.end() - 1, matching_brace(code, m.end() - 1)) for m in TEST_MOD_RE.finditer(code)]


def functions(path, no_tests=False):
    """Yields (name, start_line, length) for each fn item with a body in path."""
    code = strip_code(open(path, encoding='utf-8').read())
    skip = test_spans(code) if no_tests else []
    for m in FN_RE.finditer(code):
        if any(a < m.start() < b for a, b in skip):
            continue
        j = body_start(code, m.end())
        if j < 0:
            continue
        k = matching_brace(code, j)
        start = code.count('\n', 0, m.start()) + 1
        end = code.count('\n', 0, k) + 1
        yield m.group(1), start, end - start + 1


def main(argv):
    minimum, no_tests = 0, False
    while argv[:1] in (['--min'], ['--no-tests'], ['--help'], ['-h']):
        if argv[0] == '--min':
            minimum = int(argv[1]); argv = argv[2:]
        elif argv[0] == '--no-tests':
            no_tests = True; argv = argv[1:]
        else:
            print(__doc__.strip()); return
    rows = []
    for root in argv:
        paths = [root] if root.endswith('.rs') else [
            os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith('.rs')]
        if no_tests:
            paths = [p for p in paths if 'tests' not in p.split(os.sep)]
        for p in sorted(paths):
            for name, line, length in functions(p, no_tests):
                if length >= minimum:
                    rows.append((length, f'{p}:{line}', name))
    for length, where, name in sorted(rows, reverse=True):
        print(f'{length:5d}  {name:32s} {where}')


if __name__ == '__main__':
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly
    main(sys.argv[1:])
