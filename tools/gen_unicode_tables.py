#!/usr/bin/env python3
"""Generate src/text/unicode_tables.c: the Unicode data the tokenizer needs.

    python3 tools/gen_unicode_tables.py [--ucd /usr/share/unicode] > src/text/unicode_tables.c

Sources
  * Debian's `unicode-data` package (UCD 15.0.0 on bookworm): UnicodeData.txt, PropList.txt,
    CompositionExclusions.txt, DerivedAge.txt, DerivedNormalizationProps.txt (cross-check).
  * PyPI `unicodedata2==16.0.0` for the general category of code points that are unassigned in
    UCD 15.0 but assigned in 16.0 (see below why). Install: pip install unicodedata2==16.0.0

Which Unicode version, and why (measured against HF `tokenizers` 0.23, the reference we must
reproduce token for token):
  * Regex classes \\p{L} \\p{N} \\p{M}: HF runs the Split pattern with Oniguruma, whose tables are
    Unicode 16.0 (every code point agrees with unicodedata2 16.0; UCD 15.0 lacks 4924 L, 80 N and
    51 M code points). So categories = UCD 15.0 + the 16.0 additions.
  * \\s: Oniguruma's \\s is exactly the 25 White_Space code points of PropList.txt.
  * NFC: HF's normalizer (crate unicode-normalization-alignments) carries Unicode 9.0 data: it
    knows no combining class or decomposition of any code point assigned after 9.0 (e.g. U+0D3B,
    U+1133B, U+11938). So the normalisation tables keep only code points with Age <= 9.0.
Per-code-point agreement of all of this with HF is checked by tests/py/test_tokenizer_hf.py.

Output layout (see src/text/unicode.h): a two-stage table (cp >> 7 -> block of 128 bytes) giving
per-code-point flags, a second one giving the canonical combining class, a sorted table of full
canonical decompositions and a sorted table of primary-composite pairs (Hangul is algorithmic).
"""
import argparse
import os
import re
import sys

NFC_MAX_AGE = (9, 0)
CAT_UNICODE = '16.0.0'
BLOCK = 128
NCP = 0x110000

F_L, F_N, F_M, F_WS, F_NFC = 1, 2, 4, 8, 16


def parse_ranges(path, want_field=None):
    """yield (first, last, fields[1:]) for each data line of a UCD property file"""
    with open(path, encoding='utf-8') as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            parts = [p.strip() for p in line.split(';')]
            a, _, b = parts[0].partition('..')
            a = int(a, 16)
            b = int(b, 16) if b else a
            yield a, b, parts[1:]


def load_unicodedata(path):
    cat, ccc, dec = {}, {}, {}
    first = None
    with open(path, encoding='utf-8') as f:
        for line in f:
            fl = line.rstrip('\n').split(';')
            cp = int(fl[0], 16)
            name = fl[1]
            if name.endswith(', First>'):
                first = cp
                continue
            rng = range(first, cp + 1) if name.endswith(', Last>') else (cp,)
            for c in rng:
                cat[c] = fl[2]
                if int(fl[3]):
                    ccc[c] = int(fl[3])
            if fl[5] and not fl[5].startswith('<'):
                dec[cp] = [int(x, 16) for x in fl[5].split()]
    return cat, ccc, dec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--ucd', default='/usr/share/unicode')
    args = ap.parse_args()
    u = lambda n: os.path.join(args.ucd, n)

    try:
        import unicodedata2
    except ImportError:
        sys.exit('gen_unicode_tables: needs PyPI unicodedata2==16.0.0 (pip install unicodedata2==16.0.0)')
    if unicodedata2.unidata_version != CAT_UNICODE:
        sys.exit(f'gen_unicode_tables: unicodedata2 has Unicode {unicodedata2.unidata_version}, '
                 f'need {CAT_UNICODE} (the version HF tokenizers\' Oniguruma uses)')

    with open(u('ReadMe.txt'), encoding='utf-8') as f:
        readme = f.read()
    m = re.search(r'Version (\d+\.\d+\.\d+)', readme)
    ucd_version = m.group(1) if m else '?'
    cat, ccc, dec = load_unicodedata(u('UnicodeData.txt'))

    age = {}
    for a, b, (v,) in parse_ranges(u('DerivedAge.txt')):
        t = tuple(int(x) for x in v.split('.'))
        for c in range(a, b + 1):
            age[c] = t
    old = lambda c: c in age and age[c] <= NFC_MAX_AGE

    # general categories: UCD file first, 16.0 additions from unicodedata2 for unassigned points
    added = 0
    for c in range(NCP):
        if 0xD800 <= c <= 0xDFFF:
            continue
        c16 = unicodedata2.category(chr(c))
        c15 = cat.get(c, 'Cn')
        if c15 == 'Cn' and c16 != 'Cn':
            cat[c] = c16
            added += 1
        elif c15 != 'Cn' and c15[0] != c16[0]:
            sys.exit(f'U+{c:04X}: major category changed {c15} -> {c16}; review before regenerating')

    ws = set()
    for a, b, (p,) in parse_ranges(u('PropList.txt')):
        if p == 'White_Space':
            ws.update(range(a, b + 1))

    # ---- normalisation data restricted to Age <= 9.0 ----
    ccc9 = {c: k for c, k in ccc.items() if old(c)}
    dec9 = {c: d for c, d in dec.items() if old(c)}
    excl = set()
    for a, b, _ in parse_ranges(u('CompositionExclusions.txt')):
        excl.update(range(a, b + 1))

    def full_dec(c):
        if c in dec9:
            r = []
            for x in dec9[c]:
                r.extend(full_dec(x))
            return r
        return [c]

    comp = {}
    full_excl = set()
    for c, d in dec9.items():
        if len(d) == 1 or c in excl or ccc9.get(c, 0) or ccc9.get(d[0], 0):
            full_excl.add(c)
            continue
        assert len(d) == 2
        comp[(d[0], d[1])] = c
    # cross-check our exclusion set against the UCD's derived property (for old code points)
    fce = set()
    qc = {}
    for a, b, f in parse_ranges(u('DerivedNormalizationProps.txt')):
        if f[0] == 'Full_Composition_Exclusion':
            fce.update(c for c in range(a, b + 1) if old(c))
        if f[0] == 'NFC_QC':
            for c in range(a, b + 1):
                qc[c] = f[1]
    if fce != full_excl:
        sys.exit(f'exclusion mismatch: {sorted(fce ^ full_excl)[:10]}')
    seconds = {b for (_, b) in comp}
    # Hangul: V and T jamo are "Maybe" (they compose with a preceding L / LV)
    seconds.update(range(0x1161, 0x1176))
    seconds.update(range(0x11A8, 0x11C3))
    nfc_sens = set(ccc9) | full_excl | seconds
    for c in nfc_sens:  # everything flagged must be old; cross-check with UCD NFC_QC
        assert old(c)
    for c, v in qc.items():
        if old(c) and v in ('N', 'M') and c not in nfc_sens:
            sys.exit(f'U+{c:04X} NFC_QC={v} but not flagged')

    # ---- flags table ----
    flags = bytearray(NCP)
    for c, k in cat.items():
        if k[0] == 'L':
            flags[c] |= F_L
        elif k[0] == 'N':
            flags[c] |= F_N
        elif k[0] == 'M':
            flags[c] |= F_M
    for c in ws:
        flags[c] |= F_WS
    for c in nfc_sens:
        flags[c] |= F_NFC
    ccc_tab = bytearray(NCP)
    for c, k in ccc9.items():
        ccc_tab[c] = k

    out = sys.stdout
    w = out.write
    w('/* GENERATED by tools/gen_unicode_tables.py - do not edit.\n')
    w(f' * UCD {ucd_version} (Debian unicode-data); categories + Unicode {CAT_UNICODE} additions\n')
    w(f' * ({added} code points, from unicodedata2); normalisation data limited to Age <= '
      f'{NFC_MAX_AGE[0]}.{NFC_MAX_AGE[1]}\n * (what HF tokenizers uses, see the generator). */\n')
    w('#include "unicode.h"\n\n')

    def two_stage(name, data):
        blocks = {}
        idx = []
        order = []
        for i in range(0, NCP, BLOCK):
            b = bytes(data[i:i + BLOCK])
            if b not in blocks:
                blocks[b] = len(order)
                order.append(b)
            idx.append(blocks[b])
        assert len(order) < 65536
        w(f'/* {len(order)} distinct blocks of {BLOCK} */\n')
        w(f'const uint16_t kz_u_{name}_idx[{len(idx)}] = {{\n')
        for i in range(0, len(idx), 16):
            w('    ' + ','.join(str(x) for x in idx[i:i + 16]) + ',\n')
        w('};\n')
        w(f'const uint8_t kz_u_{name}_blk[{len(order) * BLOCK}] = {{\n')
        for b in order:
            for i in range(0, BLOCK, 32):
                w('    ' + ','.join(str(x) for x in b[i:i + 32]) + ',\n')
        w('};\n\n')
        return len(idx) * 2 + len(order) * BLOCK

    sz = two_stage('flags', flags)
    sz += two_stage('ccc', ccc_tab)

    # decompositions (full, recursive; Hangul excluded: algorithmic)
    items = sorted(dec9)
    pool = []
    w(f'const uint32_t kz_u_dec_cp[{len(items)}] = {{\n')
    for i in range(0, len(items), 12):
        w('    ' + ','.join(f'0x{c:X}' for c in items[i:i + 12]) + ',\n')
    w('};\n')
    offs = []
    for c in items:
        d = full_dec(c)
        assert 1 <= len(d) <= 4 and len(pool) < (1 << 13)
        offs.append(len(pool) | (len(d) << 13))
        pool.extend(d)
    w(f'const uint16_t kz_u_dec_off[{len(items)}] = {{ /* pool offset | length << 13 */\n')
    for i in range(0, len(offs), 16):
        w('    ' + ','.join(str(x) for x in offs[i:i + 16]) + ',\n')
    w('};\n')
    w(f'const uint32_t kz_u_dec_pool[{len(pool)}] = {{\n')
    for i in range(0, len(pool), 12):
        w('    ' + ','.join(f'0x{c:X}' for c in pool[i:i + 12]) + ',\n')
    w('};\n')
    w(f'const int kz_u_n_dec = {len(items)};\n\n')

    pairs = sorted(comp.items())
    w(f'const uint64_t kz_u_comp_key[{len(pairs)}] = {{ /* first << 21 | second, sorted */\n')
    for i in range(0, len(pairs), 6):
        w('    ' + ','.join(f'0x{(a << 21 | b):X}ull' for (a, b), _ in pairs[i:i + 6]) + ',\n')
    w('};\n')
    w(f'const uint32_t kz_u_comp_val[{len(pairs)}] = {{\n')
    for i in range(0, len(pairs), 12):
        w('    ' + ','.join(f'0x{c:X}' for _, c in pairs[i:i + 12]) + ',\n')
    w('};\n')
    w(f'const int kz_u_n_comp = {len(pairs)};\n')
    sz += len(items) * 6 + len(pool) * 4 + len(pairs) * 12
    print(f'gen_unicode_tables: {sz} bytes of tables, {len(items)} decompositions, '
          f'{len(pairs)} compositions, {added} code points from Unicode {CAT_UNICODE}', file=sys.stderr)


if __name__ == '__main__':
    main()
