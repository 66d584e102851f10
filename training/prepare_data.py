#!/usr/bin/env python3
"""Rebuild the training corpus of the default model, deterministically, from its sources.

    python3 training/prepare_data.py [--state /work/train-state]

Sources (versions and licences: training/data/SOURCES.md): Debian documentation packages
(HTML, English + French) fetched with `apt-get download PKG=VERSION` into STATE/debs, and
Project Gutenberg public-domain novels read from a git mirror of OneDeadKey/kalamine-corpus
at a pinned commit (STATE/mirrors/kalamine-corpus.git or --kalamine GITDIR).

Output (STATE/corpus/): train.txt, heldout.txt (+ heldout_en.txt, heldout_fr.txt), heldout_plain*.txt
(the same held-out text without <|endoftext|> lines, for perplexity tools) and stats.json. Documents are separated by a line holding only <|endoftext|>. Markup is stripped,
paragraphs are re-flowed, exact duplicate paragraphs (normalised) are dropped corpus-wide,
and every source is cut into chunks of consecutive paragraphs of which a fixed, hash-chosen
1/40 goes to held-out: held-out text is never in train.txt.
"""
import argparse
import hashlib
import html
import html.parser
import json
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

DEBS = {  # package: version (Debian 12 "bookworm")
    "debian-handbook": "11.20220922",
    "debian-reference-en": "2.100", "debian-reference-fr": "2.100",
    "debian-faq": "11.1", "debian-faq-fr": "11.1",
    "developers-reference": "12.18", "developers-reference-fr": "12.18",
    "maint-guide": "1.2.53", "maint-guide-fr": "1.2.53",
    "harden-doc": "3.19+nmu1",
    "aptitude-doc-en": "0.8.13-5", "aptitude-doc-fr": "0.8.13-5",
}
# (name, lang, package, regex on the path inside the package)
HTML_SOURCES = [
    ("debian-handbook.en", "en", "debian-handbook", r"/html/en-US/[^/]+\.html$"),
    ("debian-handbook.fr", "fr", "debian-handbook", r"/html/fr-FR/[^/]+\.html$"),
    ("debian-reference.en", "en", "debian-reference-en", r"\.en\.html$"),
    ("debian-reference.fr", "fr", "debian-reference-fr", r"\.fr\.html$"),
    ("debian-faq.en", "en", "debian-faq", r"\.html$"),
    ("debian-faq.fr", "fr", "debian-faq-fr", r"\.html$"),
    ("developers-reference.en", "en", "developers-reference", r"\.html$"),
    ("developers-reference.fr", "fr", "developers-reference-fr", r"\.html$"),
    ("maint-guide.en", "en", "maint-guide", r"\.html$"),
    ("maint-guide.fr", "fr", "maint-guide-fr", r"\.html$"),
    ("harden-doc.en", "en", "harden-doc", r"/html/en-US/[^/]+\.html$"),
    ("harden-doc.fr", "fr", "harden-doc", r"/html/fr-FR/[^/]+\.html$"),
    ("aptitude-doc.en", "en", "aptitude-doc-en", r"\.html$"),
    ("aptitude-doc.fr", "fr", "aptitude-doc-fr", r"\.html$"),
]
KALAMINE_COMMIT = "97a842c440ce85e6fd784c2dc96f53d528067b1d"
GUTENBERG = [  # (name, lang, path in kalamine-corpus)
    ("gutenberg.alice.en", "en", "corpus/gutenberg/en_alice.txt"),
    ("gutenberg.don_quixote.en", "en", "corpus/gutenberg/en_don_quixote.txt"),
    ("gutenberg.monte_cristo.en", "en", "corpus/gutenberg/en_monte_cristo.txt"),
    ("gutenberg.pinocchio.en", "en", "corpus/gutenberg/en_pinocchio.txt"),
    ("gutenberg.alice.fr", "fr", "corpus/gutenberg/fr_alice.txt"),
    ("gutenberg.don_quixote.fr", "fr", "corpus/gutenberg/fr_don_quixote.txt"),
    ("gutenberg.monte_cristo_1.fr", "fr", "corpus/gutenberg/fr_monte_cristo_1.txt"),
    ("gutenberg.monte_cristo_2.fr", "fr", "corpus/gutenberg/fr_monte_cristo_2.txt"),
    ("gutenberg.monte_cristo_3.fr", "fr", "corpus/gutenberg/fr_monte_cristo_3.txt"),
    ("gutenberg.monte_cristo_4.fr", "fr", "corpus/gutenberg/fr_monte_cristo_4.txt"),
]
EOT = "<|endoftext|>"
CHUNK_PARAS = 24      # consecutive paragraphs per split unit: held-out text is contiguous
HELDOUT_ONE_IN = 40
MIN_CHARS = 20


class TextExtractor(html.parser.HTMLParser):
    """Paragraph text of a DocBook-style HTML page: block elements become paragraphs; code
    listings, navigation, tables of contents, scripts and styles are dropped."""
    BLOCK = {"p", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "blockquote", "td", "th", "div",
             "title", "br", "tr"}
    SKIP = {"pre", "script", "style", "head"}
    SKIP_CLASS = re.compile(r"\b(navheader|navfooter|toc|list-of|titlepage|legalnotice|"
                            r"programlisting|screen|footnotes|index|breadcrumbs)\b")

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paras, self.cur, self.skip = [], [], []  # skip: stack of tags that opened a skip

    def _flush(self):
        t = " ".join("".join(self.cur).split())
        if t:
            self.paras.append(t)
        self.cur = []

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class") or ""
        if tag in ("br", "img", "meta", "link", "hr", "input"):  # void elements
            if tag == "br" and not self.skip:
                self._flush()
            return
        if self.skip:
            self.skip.append(tag)
            return
        if tag in self.SKIP or self.SKIP_CLASS.search(cls):
            self._flush()
            self.skip.append(tag)
            return
        if tag in self.BLOCK:
            self._flush()

    def handle_endtag(self, tag):
        if self.skip:
            self.skip.pop()
            return
        if tag in self.BLOCK:
            self._flush()

    def handle_data(self, data):
        if not self.skip:
            self.cur.append(data)

    def close(self):
        super().close()
        self._flush()


def html_paragraphs(raw):
    p = TextExtractor()
    p.feed(raw.decode("utf-8", "replace"))
    p.close()
    # Keep prose: at least 4 words and mostly letters (drops menus, command lines, tables).
    out = []
    for t in p.paras:
        letters = sum(c.isalpha() or c.isspace() for c in t)
        if len(t.split()) >= 4 and letters >= 0.8 * len(t):
            out.append(t)
    return out


def gutenberg_paragraphs(text):
    m = re.search(r"^\*\*\* ?START OF.*?\*\*\*.*?$", text, re.M)
    e = re.search(r"^\*\*\* ?END OF.*?\*\*\*", text, re.M)
    body = text[m.end() if m else 0: e.start() if e else len(text)]
    out = []
    for block in re.split(r"\n\s*\n", body):
        t = " ".join(block.split())
        t = t.replace("_", "")  # Gutenberg's _italics_ markers
        if not t or t.startswith("[Illustration") or re.fullmatch(r"[IVXLC]+\.?", t):
            continue
        out.append(t)
    return out


def norm_key(t):
    return hashlib.sha1(" ".join(t.lower().split()).encode()).digest()


def ensure_debs(debdir):
    debdir.mkdir(parents=True, exist_ok=True)
    for pkg, ver in DEBS.items():
        if not list(debdir.glob(f"{pkg}_{ver.replace(':', '%3a')}_*.deb")):
            subprocess.run(["apt-get", "download", f"{pkg}={ver}"], cwd=debdir, check=True)
        x = debdir / "x" / pkg
        if not x.exists():
            deb = next(debdir.glob(f"{pkg}_{ver}_*.deb"))
            x.mkdir(parents=True)
            subprocess.run(["dpkg-deb", "-x", str(deb), str(x)], check=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--state", default="/work/train-state")
    ap.add_argument("--kalamine", help="git dir of OneDeadKey/kalamine-corpus "
                    "(default: STATE/mirrors/kalamine-corpus.git, else the fetch-tool mirror)")
    a = ap.parse_args(argv)
    state = Path(a.state)
    ensure_debs(state / "debs")
    kal = a.kalamine
    if not kal:
        for c in (state / "mirrors/kalamine-corpus.git", Path("/work/.mirror/OneDeadKey+kalamine-corpus/repo")):
            if c.exists():
                kal = str(c)
                break
    if not kal:
        sys.exit("need a git clone of https://github.com/OneDeadKey/kalamine-corpus "
                 f"(commit {KALAMINE_COMMIT}): pass --kalamine GITDIR")

    docs = []  # (name, lang, [paragraphs])
    for name, lang, pkg, rx in HTML_SOURCES:
        root = state / "debs" / "x" / pkg
        paras = []
        for f in sorted(p for p in root.rglob("*.html") if re.search(rx, str(p))):
            paras += html_paragraphs(f.read_bytes())
        docs.append((name, lang, paras))
    for name, lang, path in GUTENBERG:
        raw = subprocess.run(["git", "--git-dir", kal, "show", f"{KALAMINE_COMMIT}:{path}"],
                             check=True, capture_output=True).stdout
        text = unicodedata.normalize("NFC", raw.decode("utf-8-sig").replace("\r\n", "\n"))
        docs.append((name, lang, gutenberg_paragraphs(text)))

    seen = set()
    train, held = [], {"en": [], "fr": []}
    stats = {}
    for name, lang, paras in docs:
        kept = []
        for t in paras:
            t = unicodedata.normalize("NFC", html.unescape(t))
            k = norm_key(t)
            if len(t) < MIN_CHARS and not name.startswith("gutenberg") or k in seen:
                continue
            seen.add(k)
            kept.append(t)
        st = {"lang": lang, "paragraphs": len(kept), "train_bytes": 0, "heldout_bytes": 0}
        for i in range(0, len(kept), CHUNK_PARAS):
            chunk = "\n\n".join(kept[i:i + CHUNK_PARAS])
            h = int.from_bytes(hashlib.sha1(f"{name}/{i}".encode()).digest()[:4], "little")
            if h % HELDOUT_ONE_IN == 0:
                held[lang].append(chunk)
                st["heldout_bytes"] += len(chunk.encode())
            else:
                train.append(chunk)
                st["train_bytes"] += len(chunk.encode())
        stats[name] = st

    out = state / "corpus"
    out.mkdir(parents=True, exist_ok=True)
    sep = f"\n{EOT}\n"
    files = {"train.txt": sep.join(train), "heldout_en.txt": sep.join(held["en"]),
             "heldout_fr.txt": sep.join(held["fr"]),
             "heldout.txt": sep.join(held["en"] + held["fr"]),
             # no special tokens: what perplexity tools read (llama-perplexity does not parse specials)
             "heldout_plain.txt": "\n\n".join(held["en"] + held["fr"]),
             "heldout_plain_en.txt": "\n\n".join(held["en"]), "heldout_plain_fr.txt": "\n\n".join(held["fr"])}
    for fn, s in files.items():
        tmp = out / (fn + ".tmp")
        tmp.write_text(s + "\n", encoding="utf-8")
        tmp.replace(out / fn)
    stats["_files"] = {fn: {"bytes": len(s.encode()), "sha256": hashlib.sha256(s.encode()).hexdigest()}
                       for fn, s in files.items()}
    (out / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    for name, st in stats.items():
        if not name.startswith("_"):
            print(f"{name:30s} {st['lang']} paras {st['paragraphs']:6d} train {st['train_bytes']:9d} "
                  f"held {st['heldout_bytes']:7d}")
    for fn, v in stats["_files"].items():
        print(f"{fn}: {v['bytes']} bytes sha256 {v['sha256'][:16]}")


if __name__ == "__main__":
    main()
