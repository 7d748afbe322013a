#!/usr/bin/env python3
# Usage: python3 scripts/fn_lengths.py [--min N] DIR_OR_FILE... (Rust fn items by length in lines, longest first)
# A length counts from the `fn` line to its closing brace; braces in strings, chars and comments
# are ignored, and closures and nested items count toward the function holding them.
import os, re, sys

FN_RE = re.compile(r'\bfn\s+([A-Za-z_][A-Za-z0-9_]*)')


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
        elif c == 'r' and re.match(r'r#*"', text[i:]) and (i == 0 or not (text[i-1].isalnum() or text[i-1] == '_')):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
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


def functions(path):
    """Yields (name, start_line, length) for each fn item with a body in path."""
    code = strip_code(open(path, encoding='utf-8').read())
    for m in FN_RE.finditer(code):
        # find the body's opening brace before any ';' (a declaration without body)
        j = m.end(); depth_paren = 0
        while j < len(code):
            ch = code[j]
            if ch in '(<[': depth_paren += 1
            elif ch in ')>]': depth_paren -= 1
            elif ch == ';' and depth_paren <= 0: j = -1; break
            elif ch == '{' and depth_paren <= 0: break
            j += 1
        if j < 0 or j >= len(code):
            continue
        depth, k = 0, j
        while k < len(code):
            if code[k] == '{': depth += 1
            elif code[k] == '}':
                depth -= 1
                if depth == 0: break
            k += 1
        start = code.count('\n', 0, m.start()) + 1
        end = code.count('\n', 0, k) + 1
        yield m.group(1), start, end - start + 1


def main(argv):
    minimum = 0
    if argv[:1] == ['--min']:
        minimum = int(argv[1]); argv = argv[2:]
    rows = []
    for root in argv:
        paths = [root] if root.endswith('.rs') else [
            os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith('.rs')]
        for p in sorted(paths):
            for name, line, length in functions(p):
                if length >= minimum:
                    rows.append((length, f'{p}:{line}', name))
    for length, where, name in sorted(rows, reverse=True):
        print(f'{length:5d}  {name:32s} {where}')


if __name__ == '__main__':
    main(sys.argv[1:])
