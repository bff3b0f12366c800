"""Loaders (Markdown, HTML, text, FAQ files, encodings) and the token-aware chunker, without a model."""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pytest

from knowledge.chunking import Chunker
from knowledge.errors import IngestError
from knowledge.loaders import load_document
from build_scripts.tiny_models import tiny_bert_tokenizer

MANUAL = """---
title: front matter is not content
---
Intro text before any heading.

# Driving

## Regenerative braking

Lift off to slow down.

### One-pedal mode

Switch it on in Settings.

```sh
# not a heading inside a code fence
```

Safety
======

Child locks are in the rear doors.
"""


def sections(doc):
    return [(" > ".join(s.heading), doc.text[s.start:s.end].strip()) for s in doc.sections]


def test_markdown_headings_become_heading_paths(tmp_path):
    path = tmp_path / "manual.md"
    path.write_text(MANUAL)
    doc = load_document(path)
    got = sections(doc)
    assert got[0] == ("", "Intro text before any heading.")
    assert ("Driving > Regenerative braking", "Lift off to slow down.") in got
    assert got[2][0] == "Driving > Regenerative braking > One-pedal mode"
    assert "# not a heading" in got[2][1]  # the fenced line stayed in the body
    assert got[3] == ("Safety", "Child locks are in the rear doors.")
    assert "front matter" not in "".join(t for _, t in got)


def test_html_text_and_headings(tmp_path):
    path = tmp_path / "page.html"
    path.write_text("<html><head><title>T</title><style>p{}</style></head><body><h1>Charging</h1>"
                    "<p>Plug &amp; charge.</p><script>var x=1;</script><h2>At home</h2><ul><li>Wallbox</li>"
                    "<li>Socket</li></ul></body></html>")
    doc = load_document(path)
    assert doc.title == "T"
    assert sections(doc) == [("Charging", "Plug & charge."), ("Charging > At home", "Wallbox\nSocket")]


# the chrome of a Sphinx page (basic theme) with no content of its own
CHROME_ONLY = """<!DOCTYPE html><html><head><title>Index — Docs</title></head><body>
<div class="related" role="navigation"><h3>Navigation</h3><ul><li><a href="genindex.html">index</a></li>
<li class="right"><a href="next.html">next</a> |</li></ul></div>
<div class="sphinxsidebar" role="navigation"><h3><a href="index.html">Table of Contents</a></h3>
<ul><li><a class="reference internal" href="#">Intro</a></li></ul><h3>This Page</h3>
<ul class="this-page-menu"><li><a href="_sources/x.rst.txt" rel="nofollow">Show Source</a></li></ul>
<div id="searchbox" role="search"><h3>Quick search</h3><form action="search.html"><input name="q"/></form></div></div>
<div class="footer" role="contentinfo">&#169; Copyright 2010 Pallets. Created using <a href="https://sphinx-doc.org/">Sphinx</a>.</div>
<p><a href="https://github.com/x/y/issues">Report a Bug</a> / <a href="_sources/x.rst.txt">Show Source</a></p>
<p>Copyright 2024, the authors.</p></body></html>"""
REALDOCS = Path(__file__).resolve().parents[1] / "knowledge" / "samples" / "realdocs" / "flask"


def test_html_chrome_only_page_has_no_text(tmp_path):
    path = tmp_path / "index.html"
    path.write_text(CHROME_ONLY)
    with pytest.raises(IngestError, match="no text to index"):
        load_document(path)


def test_html_headings_lose_permalink_anchors_and_code_stays_whole(tmp_path):
    path = tmp_path / "faq.html"
    path.write_text('<main><h1>FAQ<a class="headerlink" href="#faq" title="Permalink to this headline">¶</a></h1>'
                    '<h2>How do I…?<a href="#how">¶</a></h2><p>Like this:</p><pre>pip install x\n\n\nimport x\n'
                    '    x.run()</pre><p>Done.</p><h2 id="why">Why? <a class="anchor" href="#why">#</a></h2>'
                    '<p>Because.</p><h3>Permalink to this heading</h3><p>Kept under its parent.</p></main>')
    got = sections(load_document(path))
    assert got == [("FAQ > How do I…?", "Like this:\n\npip install x\nimport x\n    x.run()\n\nDone."),
                   ("FAQ > Why?", "Because."), ("FAQ > Why?", "Kept under its parent.")]
    md = tmp_path / "faq.md"
    md.write_text("# FAQ ¶\n\n## How do I…?¶\n\nLike this.\n")
    assert sections(load_document(md)) == [("FAQ > How do I…?", "Like this.")]


def test_html_sphinx_page_keeps_its_sections_and_drops_its_chrome():
    doc = load_document(REALDOCS / "security.html")
    assert doc.title == "Security Considerations — Flask Documentation (2.2.x)"
    headings = [" > ".join(s.heading) for s in doc.sections]
    top = "Security Considerations"
    headers = "Security Considerations > Security Headers"
    assert headings == [top, f"{top} > Cross-Site Scripting (XSS)", f"{top} > Cross-Site Request Forgery (CSRF)",
                        f"{top} > JSON Security", headers, f"{headers} > HTTP Strict Transport Security (HSTS)",
                        f"{headers} > Content Security Policy (CSP)", f"{headers} > X-Content-Type-Options",
                        f"{headers} > X-Frame-Options", f"{headers} > Set-Cookie options",
                        f"{headers} > HTTP Public Key Pinning (HPKP)", f"{top} > Copy/Paste to Terminal"]
    for chrome in ("Navigation", "Show Source", "Quick search", "Table of Contents", "©", "Created using",
                   "Report a Bug", "¶", "previous |", "Contents"):
        assert chrome not in doc.text, chrome
    assert "response.headers['Strict-Transport-Security'] = 'max-age=31536000; includeSubDomains'" in doc.text
    assert doc.text.startswith("Web applications usually face all kinds of security problems")


def test_html_mkdocs_pages_keep_every_heading_and_drop_their_chrome():
    pages = REALDOCS.parent / "mkdocs"
    doc = load_document(pages / "deploying-your-docs.html")
    assert doc.title == "Deploying Your Docs - MkDocs"
    top, gh = "Deploying your docs", "Deploying your docs > GitHub Pages"
    assert [" > ".join(s.heading) for s in doc.sections] == [
        top, gh, f"{gh} > Project Pages", f"{gh} > Organization and User Pages", f"{gh} > Custom Domains",
        f"{top} > Read the Docs", f"{top} > Other Providers", f"{top} > Local Files", f"{top} > 404 Pages"]
    assert doc.text.startswith("A basic guide to deploying your docs to various hosting providers\n\n")
    # headings whose ids ("search", "nav", "edit_uri", "copyright", "min_search_length") look like chrome
    config = load_document(pages / "configuration.html")
    headings = {" > ".join(s.heading) for s in config.sections}
    for h in ("Configuration > Project information > edit_uri", "Configuration > Project information > copyright",
              "Configuration > Documentation layout > nav",
              "Configuration > Formatting options > plugins > Search > min_search_length"):
        assert h in headings, h
    for name in sorted(pages.glob("*.html")):
        page = load_document(name)
        assert not any("\uf0c1" in h for s in page.sections for h in s.heading), name.name  # permalink glyphs
        text = page.text
        for chrome in ("Edit on GitHub", "Keyboard Shortcuts", "From here you can search", "Maintained by",
                       "Toggle navigation", "Table of Contents"):
            assert chrome not in text, (name.name, chrome)


def test_html_doxygen_pages_take_the_title_block_as_their_top_heading():
    pages = REALDOCS.parent / "doxygen"
    doc = load_document(pages / "searching.html")
    assert doc.title == "Doxygen: Searching"
    assert [" > ".join(s.heading) for s in doc.sections] == ["Searching"] + [
        f"Searching > {h}" for h in ("1. Client side searching", "2. Server side searching",
                                     "3. Server side searching with external indexing", "4. Windows Compiled HTML Help",
                                     "5. Mac OS X Doc Sets", "6. Qt Compressed Help", "7. Eclipse Help Plugin")]
    assert doc.text.startswith("Doxygen indexes your source code")
    custom = [" > ".join(s.heading) for s in load_document(pages / "customize.html").sections]
    assert custom[:4] == ["Customizing the output", "Customizing the output > Minor Tweaks",
                          "Customizing the output > Minor Tweaks > Overall Color",
                          "Customizing the output > Minor Tweaks > Navigation"]
    faq = load_document(pages / "faq.html")
    assert len(faq.sections) == 21 and all(s.heading[0] == "Frequently Asked Questions" for s in faq.sections)
    assert [s.heading for s in load_document(pages / "preprocessing.html").sections] == [("Preprocessing",)]
    for name in sorted(pages.glob("*.html")):
        text = load_document(name).text
        for chrome in ("Table of Contents", "Generated by", "Go to the next section", "Doxygen\n"):
            assert chrome not in text, (name.name, chrome)


def test_html_asciidoc_manual_pages_keep_their_sections_and_option_lists():
    pages = REALDOCS.parent / "asciidoc"
    doc = load_document(pages / "git-clean.html")
    assert doc.title == "git-clean(1)"
    top = "git-clean(1) Manual Page"
    assert [" > ".join(s.heading) for s in doc.sections] == [f"{top} > {h}" for h in (
        "NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "Interactive mode", "CONFIGURATION", "SEE ALSO", "GIT")]
    assert doc.text.startswith("git-clean - Remove untracked files from the working tree\n\n")
    # a definition list's term starts a paragraph, its description on the next line
    assert "\n\nclean.requireForce\nA boolean to make git-clean do nothing unless given -f" in doc.text
    bisect = {" > ".join(s.heading) for s in load_document(pages / "git-bisect.html").sections}
    assert {"git-bisect(1) Manual Page > DESCRIPTION > Bisect skip",
            "git-bisect(1) Manual Page > DESCRIPTION > Bisect run"} <= bisect
    for name in sorted(pages.glob("*.html")):
        page = load_document(name)
        assert all(s.heading and s.heading[0].endswith("Manual Page") for s in page.sections), name.name
        assert "Last updated" not in page.text, name.name


def test_html_man2html_pages_keep_their_sections_without_the_cgi_header_or_the_page_index():
    """man2html (1.6g) writes a CGI header line before the markup and ends each page with an index: a
    list of links to the page's own sections."""
    pages = REALDOCS.parent / "man2html"
    doc = load_document(pages / "fstab.5.html")
    fields = [f"The {n} field (fs_{f})." for n, f in (("first", "spec"), ("second", "file"), ("third", "vfstype"),
                                                       ("fourth", "mntops"), ("fifth", "freq"), ("sixth", "passno"))]
    assert [" > ".join(s.heading) for s in doc.sections] == ["FSTAB"] + [f"FSTAB > {h}" for h in (
        "NAME", "SYNOPSIS", "DESCRIPTION", *[f"DESCRIPTION > {f}" for f in fields], "FILES", "NOTES", "HISTORY",
        "SEE ALSO", "REPORTING BUGS", "AVAILABILITY", "Index")]
    assert "Content-type" not in doc.text and "\nThe first field (fs_spec).\n" not in doc.text  # the index's links
    assert "nofail" in doc.text and "Lines starting with '#' are comments." in doc.text
    timer = {" > ".join(s.heading) for s in load_document(pages / "systemd.timer.5.html").sections}
    assert {"SYSTEMD.TIMER > AUTOMATIC DEPENDENCIES > Implicit Dependencies", "SYSTEMD.TIMER > OPTIONS"} <= timer
    for name in sorted(pages.glob("*.html")):
        page = load_document(name)
        assert page.title.startswith("Man page of") and not page.text.startswith("Content-type"), name.name
        assert all(s.heading for s in page.sections) and "\nNAME\n\nSYNOPSIS\n" not in page.text, name.name


def test_html_pandoc_pages_nest_their_sections_under_the_title_block():
    """pandoc (2.17, `pandoc -f man -t html5 -s --toc`) writes the page title as `<h1 class="title">` in a
    `<header>` and every section as `<h1>` too: the title heads them, the table of contents is not text."""
    pages = REALDOCS.parent / "pandoc"
    doc = load_document(pages / "apt_preferences.5.html")
    described = [f"DESCRIPTION > {h}" for h in (
        "APTs Default Priority Assignments", "Phased Updates", "The Effect of APT Preferences",
        "Matching packages in the Package field", "How APT Interprets Priorities",
        "Determination of Package Version and Distribution Properties", "Optional Lines in an APT Preferences Record")]
    examples = [f"EXAMPLES > {h}" for h in ("Tracking Stable", "Tracking Testing or Unstable",
                                            "Tracking the evolution of a codename release")]
    assert [" > ".join(s.heading) for s in doc.sections] == ["APT_PREFERENCES"] + [f"APT_PREFERENCES > {h}" for h in (
        "NAME", "DESCRIPTION", *described, *examples, "FILES", "SEE ALSO", "BUGS", "AUTHOR", "NOTES")]
    assert doc.title == "APT_PREFERENCES" and "Pin-Priority: 1001" in doc.text
    for name in sorted(pages.glob("*.html")):
        page = load_document(name)
        assert page.sections and all(s.heading[0] == page.title for s in page.sections), name.name
        assert "\nNAME\nDESCRIPTION\n" not in page.text, name.name  # the table of contents


def test_html_docusaurus_pages_keep_clean_headings_and_code_lines_without_the_site_chrome():
    """Docusaurus (3.10, the classic theme) writes a zero-width space as every heading's permalink text and
    each line of a code block as a <div> ending in <br>; around the article: navbar, sidebar, "On this
    page", "Edit this page", previous / next links and the footer."""
    pages = REALDOCS.parent / "docusaurus"
    doc = load_document(pages / "authentication.html")
    assert [" > ".join(s.heading) for s in doc.sections] == [f"Authentication > {h}" for h in (
        "Basic HTTP authentication", "Basic HTTP authentication > Percent-encoding special characters",
        "netrc support", "Keyring Support")]
    assert "\nmachine example.com\nlogin daniel\npassword qwerty\n" in doc.text
    for name in sorted(pages.glob("*.html")):
        page = load_document(name)
        assert not any("\u200b" in h for s in page.sections for h in s.heading), name.name
        for chrome in ("Edit this page", "On this page", "Copyright", "Previous", "Skip to main content"):
            assert chrome not in page.text, (name.name, chrome)


def test_html_sphinx5_pages_of_another_theme_keep_every_heading():
    """Sphinx 5.3 with its own "sphinx13" theme (Debian's sphinx-doc), another version and theme than the
    Flask pages; its internationalization page wraps headings in <a class="toc-backref">."""
    pages = REALDOCS.parent / "sphinx13"
    intl = load_document(pages / "usage" / "advanced" / "intl.html")
    assert [" > ".join(s.heading) for s in intl.sections] == ["Internationalization"] + [
        f"Internationalization > {h}" for h in (
            "Sphinx internationalization details", "Translating with sphinx-intl > Quick guide",
            "Translating with sphinx-intl > Update your po files by new pot files",
            "Using Transifex service for team translation", "Contributing to Sphinx reference translation")]
    for name in sorted(pages.rglob("*.html")):
        page = load_document(name)
        assert page.sections and all(s.heading for s in page.sections), name.name
        for chrome in ("Site navigation", "On this page"):  # the sidebar's headings
            assert chrome not in page.text and all(chrome not in s.heading for s in page.sections), name.name


def test_html_definition_list_entries_are_one_paragraph_each(tmp_path):
    """A term and every paragraph of its description are one paragraph, where the chunker cuts first:
    a chunk never starts at an entry's last paragraph ("Default: ...") and reads it as the next term's."""
    path = tmp_path / "config.html"
    path.write_text("<main><h1>Config</h1><dl><dt>LIFETIME</dt><dd><p>How long a session lasts.</p>"
                    "<p>Default: <code>31 days</code></p></dd><dt>REFRESH</dt><dd><p>Send the cookie again.</p>"
                    "<pre>REFRESH = True\n\nOTHER = 1</pre></dd></dl></main>")
    assert load_document(path).text.rstrip() == ("LIFETIME\nHow long a session lasts.\nDefault: 31 days\n\n"
                                                  "REFRESH\nSend the cookie again.\nREFRESH = True\nOTHER = 1")
    config = load_document(REALDOCS / "config.html").text
    assert "\n\nPERMANENT_SESSION_LIFETIME\nIf session.permanent is true" in config
    assert not any(p.startswith("Default:") for p in config.split("\n\n"))


def test_html_table_cells_are_words_apart(tmp_path):
    """Minified pages put cells side by side with nothing between them: "Small" and "5 kg" are two words."""
    path = tmp_path / "specs.html"
    path.write_text("<main><h1>Specs</h1><table><tr><td>Small</td><td>5 kg</td></tr></table></main>")
    assert load_document(path).text.rstrip() == "Small 5 kg"


def test_html_table_rows_carry_their_column_labels(tmp_path):
    """Under a header row each row is one line, every non-empty cell after its column's label; a row that
    does not have one cell a column, and a table without a header row (a layout table: an icon cell
    beside a <th>), are written as they are."""
    path = tmp_path / "specs.html"
    path.write_text(
        "<main><h1>Specs</h1><table><thead><tr><th>Model</th><th>Drum</th><th>Spin speed</th></tr></thead>"
        "<tbody><tr><td>Small</td><td><p>5 kg.</p><p>Steel</p></td><td>1,200 rpm</td></tr>"
        "<tr><td>Large</td><td></td><td>1,400 rpm</td></tr><tr><td colspan='3'>Both: A class</td></tr></tbody>"
        "</table><table><tr><td><img alt='!'></td><th>Note</th></tr><tr><td>Unplug first.</td></tr></table></main>")
    assert load_document(path).text.rstrip() == (
        "Model: Small; Drum: 5 kg. Steel; Spin speed: 1,200 rpm\nModel: Large; Spin speed: 1,400 rpm\n"
        "Both: A class\n\nNote\nUnplug first.")
    requirements = load_document(REALDOCS.parent / "debian-install" / "en" / "ch03s04.html").text
    assert ("Install Type: With Desktop; RAM (minimum): 1 gigabytes; RAM (recommended): 2 gigabytes; "
            "Hard Drive: 10 gigabytes\n") in requirements
    options = load_document(REALDOCS.parent / "mkdocs" / "cli.html").text
    assert "Name: -q , --quiet; Type: boolean; Description: Silence warnings; Default: False\n" in options
    assert "Name Type Description Default" not in options  # the header row is said with each row


def test_markdown_pipe_table_rows_carry_their_column_labels(tmp_path):
    path = tmp_path / "specs.md"
    path.write_text("# Specs\n\n| Model | Drum | Spin \\| speed |\n|---|:--:|--:|\n| Small | 5 kg | 1,200 rpm |\n"
                    "| Large |  | 1,400 rpm |\nAfter the table.\n\n```\n| a | b |\n|---|---|\n| 1 | 2 |\n```\n")
    doc = load_document(path)
    assert doc.text == ("# Specs\n\nModel: Small; Drum: 5 kg; Spin | speed: 1,200 rpm\nModel: Large; Spin | speed: "
                        "1,400 rpm\nAfter the table.\n\n```\n| a | b |\n|---|---|\n| 1 | 2 |\n```\n")
    assert sections(doc)[0][1].startswith("Model: Small;")


def test_html_heading_ids_are_not_chrome_names(tmp_path):
    # Python-Markdown, Sphinx and pandoc give a heading (or its section) an id made of its words
    path = tmp_path / "config.html"
    path.write_text('<main><h1 id="config">Config</h1><h2 id="nav">nav<a class="headerlink" href="#nav">\uf0c1</a></h2>'
                    '<p>The menu layout.</p><section id="search"><h2>Search</h2><p>Index options.</p>'
                    '<h3 id="min_search_length"><strong>min_search_length</strong></h3><p>Shortest query.</p></section>'
                    '<div id="searchbox"><h3>Quick search</h3><p>Type here.</p></div>'
                    '<div class="toc" id="contents"><p>Contents list</p></div></main>')
    assert sections(load_document(path)) == [("Config > nav", "The menu layout."), ("Config > Search", "Index options."),
                                              ("Config > Search > min_search_length", "Shortest query.")]


def test_html_title_block_heads_the_page_only_when_it_comes_first(tmp_path):
    page = tmp_path / "page.html"
    page.write_text('<body><div id="top"><div id="titlearea"><div id="projectname">Acme</div></div></div>'
                    '<div class="header"><div class="headertitle"><div class="title">Grouping </div></div></div>'
                    '<p>Intro.</p><h1>Modules</h1><p>Use groups.</p>'
                    '<div class="exampleblock"><div class="title">Example 1. A group</div><p>Code.</p></div></body>')
    assert sections(load_document(page)) == [("Grouping", "Intro."),
                                             ("Grouping > Modules", "Use groups.\n\nExample 1. A group\n\nCode.")]
    later = tmp_path / "later.html"
    later.write_text('<main><p>Intro first.</p><p class="title">Not the page title</p><h2>Part</h2><p>Body.</p></main>')
    assert sections(load_document(later)) == [("", "Intro first.\n\nNot the page title"), ("Part", "Body.")]


def test_html_lines_of_only_navigation_links_are_chrome(tmp_path):
    page = tmp_path / "page.html"
    page.write_text('<main><h1>Install</h1><p>Run it.</p><p>Go to the <a href="b.html">next</a> section or return to '
                    'the <a href="index.html">index</a>.</p><p>See <a href="cfg.html">the configuration</a> next.</p>'
                    '<div class="masthead">Acme Docs</div></main>')
    assert sections(load_document(page)) == [("Install", "Run it.\n\nSee the configuration next.")]


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv"])
def test_faq_formats(tmp_path, suffix):
    entries = [{"id": "a1", "category": "tyres", "question": "Pressure?", "answer": "240 kPa."},
               {"question": "No id?", "answer": "Numbered."}]
    path = tmp_path / f"faq{suffix}"
    if suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    elif suffix == ".json":
        path.write_text(json.dumps({"faq": entries}))
    else:
        path.write_text('id,category,question,answer\na1,tyres,Pressure?,240 kPa.\n,,No id?,"Numbered."\n')
    doc = load_document(path)
    assert [(s.entry_id, s.heading) for s in doc.sections] == [("a1", ("tyres",)), ("2", ())]
    assert doc.text[doc.sections[0].start:doc.sections[0].end] == "Pressure?\n240 kPa."


def test_faq_errors_name_the_entry(tmp_path):
    path = tmp_path / "faq.jsonl"
    path.write_text('{"question": "q", "answer": "a"}\n{"question": "q only"}\n')
    with pytest.raises(IngestError, match="line 2: not an FAQ entry"):
        load_document(path)
    path.write_text('{"question": "q", "answer": "a"}\n{oops\n')
    with pytest.raises(IngestError, match="line 2: invalid JSON"):
        load_document(path)


@pytest.mark.parametrize("bom,encoding", [(codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
                                          (codecs.BOM_UTF16_BE, "utf-16-be")])
def test_byte_order_marks_decide_the_encoding(tmp_path, bom, encoding):
    path = tmp_path / "note.txt"
    path.write_bytes(bom + "Winter tyres: 3 mm tread.\r\n胎压".encode(encoding))
    assert load_document(path).text == "Winter tyres: 3 mm tread.\n胎压"


def test_binary_and_unknown_encodings_are_typed_errors(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"PK\x03\x04\x00\x00binary")
    with pytest.raises(IngestError, match="binary"):
        load_document(tmp_path / "a.txt")
    (tmp_path / "b.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(IngestError, match="not UTF-8"):
        load_document(tmp_path / "b.txt")
    (tmp_path / "c.docx").write_bytes(b"x")
    with pytest.raises(IngestError, match="unsupported file type"):
        load_document(tmp_path / "c.docx")
    (tmp_path / "d.md").write_text("  \n")
    with pytest.raises(IngestError, match="no text"):
        load_document(tmp_path / "d.md")


@pytest.fixture(scope="module")
def chunker():
    return Chunker(tiny_bert_tokenizer(), max_tokens=48)


def test_long_sections_split_within_budget_with_overlap(tmp_path, chunker):
    sentences = [f"The car is {i} m." for i in range(60)]  # ~6 tokens each with the tiny vocabulary
    text = "# Charging\n\n" + " ".join(sentences[:12]) + "\n\n" + " ".join(sentences[12:])
    (tmp_path / "c.md").write_text(text)
    doc = load_document(tmp_path / "c.md")
    chunks = chunker.chunk(doc)
    assert len(chunks) > 3
    for c in chunks:
        assert c.text == doc.text[c.start:c.end] and c.heading == ("Charging",)
        assert c.embed_text == "Charging\n" + c.text
        assert c.tokens <= chunker.max_tokens
        assert c.text[0].isupper() and c.text.endswith(".")  # cut at sentence boundaries
    overlaps = sum(a.end > b.start for a, b in zip(chunks, chunks[1:]))
    assert overlaps >= len(chunks) // 2  # consecutive windows (mostly) share a sentence
    covered = "".join(sorted({s for c in chunks for s in sentences if s in c.text}))
    assert covered == "".join(sorted(sentences))  # nothing lost


def test_paragraphs_are_cut_between_not_inside(tmp_path, chunker):
    paragraphs = [" ".join(f"The car is {i}{j} m." for j in range(4)) for i in range(1, 4)]  # ~60% budget each
    (tmp_path / "p.txt").write_text("\n\n".join(paragraphs))
    chunks = chunker.chunk(load_document(tmp_path / "p.txt"))
    assert [c.text for c in chunks] == paragraphs


def test_chinese_splits_on_cjk_punctuation(tmp_path, chunker):
    body = "".join(f"第{i}句话说明充电口的指示灯颜色。" for i in range(20))
    (tmp_path / "zh.txt").write_text(body)
    doc = load_document(tmp_path / "zh.txt")
    chunks = chunker.chunk(doc)
    assert len(chunks) > 2
    assert all(c.text.endswith("。") and c.tokens <= chunker.max_tokens for c in chunks)


def test_run_on_text_falls_back_to_token_windows(tmp_path, chunker):
    (tmp_path / "blob.txt").write_text("充电" * 200)
    doc = load_document(tmp_path / "blob.txt")
    chunks = chunker.chunk(doc)
    assert len(chunks) > 5 and all(c.tokens <= chunker.max_tokens for c in chunks)
    assert chunks[0].start == 0 and chunks[-1].end == len(doc.text)


def test_faq_entry_is_one_chunk_even_when_long(tmp_path, chunker):
    answer = " ".join(["Keep the question with its answer."] * 40)
    (tmp_path / "faq.jsonl").write_text(json.dumps({"id": "long", "question": "Why?", "answer": answer}) + "\n")
    chunks = chunker.chunk(load_document(tmp_path / "faq.jsonl"))
    assert len(chunks) == 1 and chunks[0].entry_id == "long" and chunks[0].text.startswith("Why?\n")


def test_chunks_embed_where_they_are_and_store_clean_text(tmp_path):
    chunker = Chunker(tiny_bert_tokenizer(), max_tokens=128)  # room for the whole path (a quarter of L)
    (tmp_path / "a.html").write_text("<title>Aurora owner's manual</title><h1>Charging</h1><h2>At home</h2>"
                                     "<p>Use the wallbox.</p>")
    (tmp_path / "b.html").write_text("<title>Charging — Aurora docs</title><h1>Charging</h1><p>Use the wallbox.</p>")
    (tmp_path / "c.md").write_text("# Driving\n\nGo.\n\n# Safety\n\nBuckle up.\n")
    (tmp_path / "d.txt").write_text("Plain words.\n")
    got = {name: [(c.embed_text, c.text) for c in chunker.chunk(load_document(tmp_path / name))]
           for name in ("a.html", "b.html", "c.md", "d.txt")}
    assert got["a.html"] == [("Aurora owner's manual > Charging > At home\nUse the wallbox.", "Use the wallbox.")]
    # a title that repeats the first heading adds only the site's name: left out
    assert got["b.html"] == [("Charging\nUse the wallbox.", "Use the wallbox.")]
    # two chapters and no document title: each chunk carries its own chapter only
    assert got["c.md"] == [("Driving\nGo.", "Go."), ("Safety\nBuckle up.", "Buckle up.")]
    assert got["d.txt"] == [("Plain words.", "Plain words.")]


def write_pdf(path, pages: list[str]) -> None:
    """A minimal hand-written PDF (Helvetica text; a page's lines separated by newlines) with a correct
    xref table."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>",
               "<< /Type /Pages /Kids [%s] /Count %d >>" % (" ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages))),
                                                           len(pages)),
               "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i, text in enumerate(pages):
        stream = "BT /F1 12 Tf 72 720 Td " + " 0 -16 Td ".join(f"({line}) Tj" for line in text.split("\n")) + " ET"
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {5 + 2 * i} 0 R "
                       "/Resources << /Font << /F1 3 0 R >> >> >>")
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    out, offsets = "%PDF-1.4\n", []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n{body}\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n" + "".join(f"{o:010d} 00000 n \n" for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    path.write_bytes(out.encode("latin-1"))


def test_pdf_pages_become_sections(tmp_path):
    write_pdf(tmp_path / "manual.pdf", ["Wiper service mode lifts the blades.", "Fuses are under the glovebox."])
    doc = load_document(tmp_path / "manual.pdf")
    assert doc.kind == "pdf"
    assert "Wiper service mode lifts the blades." in doc.text and "Fuses are under the glovebox." in doc.text
    assert [s.heading for s in doc.sections] == [("page 1",), ("page 2",)]


def test_pdf_running_headers_and_footers_are_left_out(tmp_path):
    body = ["Wiper service mode lifts the blades.", "Fuses are under the glovebox.",
            "The Aurora Manual is in the glovebox.", "Tyre pressure is 240 kPa."]
    pages = [f"The Aurora Manual\n{line}\nPage {n} of {len(body)}" for n, line in enumerate(body, 1)]
    write_pdf(tmp_path / "manual.pdf", pages)
    doc = load_document(tmp_path / "manual.pdf")
    assert [doc.text[s.start:s.end] for s in doc.sections] == body  # the title inside a page's text stays
    write_pdf(tmp_path / "two.pdf", pages[:2])  # two pages say nothing about what repeats
    assert "Page 1 of 4" in load_document(tmp_path / "two.pdf").text


def test_broken_pdf_is_a_clear_error(tmp_path):
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4\n garbage")
    with pytest.raises(IngestError, match="PDF"):
        load_document(tmp_path / "broken.pdf")


def test_heading_text_inside_a_chrome_named_link_is_kept(tmp_path):
    """Sphinx themes wrap a heading's text in <a class="toc-backref">: the class names a table of contents,
    but the words are the heading's. Its permalink (a pilcrow) still goes."""
    from knowledge.loaders import load_document

    page = tmp_path / "install.html"
    page.write_text(
        "<html><body><div role='main'><h1>Guide<a class='headerlink' href='#guide'>¶</a></h1><p>Intro text.</p>"
        "<h2><a class='toc-backref' href='#id1'>Installation</a><a class='headerlink' href='#installation'>¶</a></h2>"
        "<p>Run the installer.</p><div class='toctree-wrapper'><ul><li><a href='x.html'>Other page</a></li></ul></div>"
        "</div></body></html>")
    doc = load_document(page)
    assert [s.heading for s in doc.sections] == [("Guide",), ("Guide", "Installation")]
    assert "¶" not in doc.text and "Other page" not in doc.text
