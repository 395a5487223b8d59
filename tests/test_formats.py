"""Tests for dense_cf.datasets.formats (docs/method.md §8)."""

import gzip
import json
import os
import pickle

import pytest

from dense_cf.datasets.formats import (
    BiencoderExample,
    DataFormatError,
    Passage,
    SkipReport,
    iter_biencoder,
    read_biencoder,
    read_corpus_tsv,
    read_gold_info,
    read_qa_csv,
    write_biencoder,
    write_corpus_tsv,
    write_gold_info,
    write_qa_csv,
)


def _ctx(title, text, **kw):
    return {"title": title, "text": text, **kw}


def _example(i, **overrides):
    d = {
        "question": f"question {i} with \u00e9 and \"quotes\" {{braces}} [brackets], commas",
        "answers": [f"answer {i}", "Beyonc\u00e9"],
        "positive_ctxs": [_ctx(f"T{i}", f"text {i} " + "x" * (i * 7),
                               score=1000, title_score=1, passage_id=str(i))],
        "negative_ctxs": [_ctx("N", "neg")],
        "hard_negative_ctxs": [_ctx("H", "hard", score=12.5, passage_id=i + 100)],
    }
    d.update(overrides)
    return d


def _write_json(path, obj, **dump_kw):
    data = json.dumps(obj, **dump_kw)
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------- biencoder

@pytest.mark.parametrize("name", ["b.json", "b.json.gz"])
def test_iter_biencoder_well_formed(tmp_path, name):
    path = _write_json(tmp_path / name, [_example(i) for i in range(5)], indent=4)
    report = SkipReport()
    examples = list(iter_biencoder(path, report=report))
    assert len(examples) == 5 and report.total == 0
    ex = examples[3]
    assert isinstance(ex, BiencoderExample)
    assert ex.question == _example(3)["question"]
    assert ex.answers == ["answer 3", "Beyonc\u00e9"]
    assert ex.positive_ctxs == [Passage("T3", "text 3 " + "x" * 21, passage_id="3", score=1000.0)]
    assert ex.negative_ctxs == [Passage("N", "neg")]
    assert ex.hard_negative_ctxs[0].passage_id == "103"  # int ids become str
    assert ex.hard_negative_ctxs[0].score == 12.5


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, 64])
@pytest.mark.parametrize("indent", [None, 2])
def test_streaming_across_chunk_boundaries(tmp_path, chunk_size, indent):
    examples = [_example(i) for i in range(6)]
    path = _write_json(tmp_path / "b.json", examples, indent=indent, ensure_ascii=(indent is None))
    got = read_biencoder(path, chunk_size=chunk_size, skip_bad=False)
    assert [e.question for e in got] == [e["question"] for e in examples]
    assert got == read_biencoder(path)


def test_streaming_reads_incrementally(tmp_path, monkeypatch):
    # The reader must not slurp the file: after the first example only a small prefix is read.
    path = _write_json(tmp_path / "b.json", [_example(i) for i in range(200)])
    size = os.path.getsize(path)
    reads = []
    real_open = open

    class Spy:
        def __init__(self, f):
            self.f = f

        def read(self, n=-1):
            assert n > 0, "whole-file read"
            data = self.f.read(n)
            reads.append(len(data))
            return data

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

    monkeypatch.setattr("builtins.open", lambda *a, **k: Spy(real_open(*a, **k)))
    it = iter_biencoder(path, chunk_size=256)
    first = next(it)
    assert first.question.startswith("question 0")
    assert sum(reads) < size / 10
    assert len(list(it)) == 199


def test_empty_list_and_whitespace(tmp_path):
    path = tmp_path / "e.json"
    path.write_text("  [ \n ]  \n")
    with pytest.raises(DataFormatError, match="no records: the file holds no examples"):
        read_biencoder(path)
    assert read_biencoder(path, allow_empty=True) == []


def test_bad_records_skipped_and_counted(tmp_path):
    records = [
        _example(0),
        {k: v for k, v in _example(1).items() if k != "question"},      # missing field
        _example(2, answers="not a list"),                                # wrong type
        _example(3, answers=["ok", 7]),                                   # wrong item type
        _example(4, positive_ctxs=[]),                                    # DPR filters these
        _example(5, hard_negative_ctxs=[{"title": "t"}]),                 # ctx missing text
        "not an object",
        _example(7),
    ]
    path = _write_json(tmp_path / "bad.json", records)
    report = SkipReport()
    got = read_biencoder(path, report=report)
    assert [e.question.split()[1] for e in got] == ["0", "7"]
    assert report.total == 6
    f = str(path)
    assert report.count(f, "missing question") == 1
    assert report.count(f, "bad answers") == 1
    assert report.count(f, "bad answers[]") == 1
    assert report.count(f, "no positive_ctxs") == 1
    assert report.count(f, "missing hard_negative_ctxs[].text") == 1
    assert report.count(f, "bad <record>") == 1
    summary = report.summary()
    assert "skipped records: 6" in summary and "no positive_ctxs: 1" in summary
    assert "record 2 (0-based index)" in summary


def test_bad_record_raises_when_not_skipping(tmp_path):
    path = _write_json(tmp_path / "bad.json", [_example(0), _example(1, answers="x")])
    it = iter_biencoder(path, skip_bad=False)
    assert next(it).question.startswith("question 0")
    with pytest.raises(DataFormatError) as info:
        next(it)
    err = info.value
    assert (err.file, err.record, err.field, err.record_kind) == (str(path), 1, "answers", "index")
    msg = str(err)
    assert str(path) in msg and "record 1" in msg and "'answers'" in msg
    # Picklable (errors cross process boundaries in data loaders).
    clone = pickle.loads(pickle.dumps(err))
    assert (clone.file, clone.record, clone.field, str(clone)) == (err.file, 1, "answers", msg)


def test_nested_field_named_in_error(tmp_path):
    bad = _example(0, negative_ctxs=[_ctx("a", "b"), _ctx("c", 5)])
    path = _write_json(tmp_path / "bad.json", [bad])
    with pytest.raises(DataFormatError, match=r"negative_ctxs\[1\]\.text") as info:
        read_biencoder(path, skip_bad=False)
    assert info.value.record == 0


def test_without_report_skips_are_logged(tmp_path, caplog):
    path = _write_json(tmp_path / "bad.json", [_example(0), _example(1, question="")])
    with caplog.at_level("WARNING"):
        got = read_biencoder(path)
    assert len(got) == 1
    assert "skipped records: 1" in caplog.text and "bad question" in caplog.text


@pytest.mark.parametrize("cut", [1, 40, -30, -2, -1])
def test_truncated_file_clear_error(tmp_path, cut):
    text = json.dumps([_example(i) for i in range(3)])
    path = tmp_path / "t.json"
    path.write_text(text[:cut])
    with pytest.raises(DataFormatError, match="truncated") as info:
        read_biencoder(path, chunk_size=16)  # even with skip_bad=True
    assert str(path) in str(info.value)


def test_truncated_gzip(tmp_path):
    path = _write_json(tmp_path / "t.json.gz", [_example(i) for i in range(50)])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataFormatError, match="cannot read file"):
        read_biencoder(path, chunk_size=64)


def test_corrupt_gzip_and_bad_utf8(tmp_path):
    path = _write_json(tmp_path / "c.json.gz", [_example(i) for i in range(50)])
    data = bytearray(path.read_bytes())
    for i in range(40, len(data) - 40, 7):  # scramble the deflate stream, keep the header
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    with pytest.raises(DataFormatError, match="cannot read file|JSON|truncated"):
        read_biencoder(path)
    bad_utf8 = tmp_path / "u.json"
    bad_utf8.write_bytes(b'[{"question": "\xff\xfe"}]')
    with pytest.raises(DataFormatError, match="cannot read file"):
        read_biencoder(bad_utf8)
    tsv = tmp_path / "p.tsv"
    tsv.write_bytes(b"id\ttext\ttitle\n1\t\xff\tT\n2\tok\tT\n")
    with pytest.raises(DataFormatError, match="line 2: .*not UTF-8.*at byte offset 16"):
        list(read_corpus_tsv(tsv, skip_bad=False))
    report = SkipReport()  # lines are the record boundary: only the bad line is lost
    assert list(read_corpus_tsv(tsv, report=report)) == [("2", "ok", "T")]
    assert report.count(reason="not UTF-8") == 1


@pytest.mark.parametrize("text,pattern", [
    ('{"question": 1}', r"expected '\[' \(a JSON list\)"),
    ('[{"question": "q",,}]', "JSON syntax error"),
    ('[1 2]', "expected ',' or ']'"),
    ('[] []', "unexpected data after the end"),
    ("", r"the file is empty \(0 bytes\)"),
])
def test_malformed_json_structure(tmp_path, text, pattern):
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(DataFormatError, match=pattern):
        read_biencoder(path, chunk_size=4)


@pytest.mark.parametrize("name", ["w.json", "w.json.gz"])
def test_write_biencoder_round_trip(tmp_path, name):
    objs = read_biencoder(_write_json(tmp_path / "src.json", [_example(i) for i in range(4)]))
    mixed = objs[:2] + [_example(9, extra_key="kept")]
    path = tmp_path / name
    assert write_biencoder(path, iter(mixed)) == 3
    back = read_biencoder(path, skip_bad=False)
    assert back[:2] == objs[:2]
    assert back[2] == read_biencoder(_write_json(tmp_path / "one.json", [_example(9)]))[0]
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        assert json.load(f)[2]["extra_key"] == "kept"
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


@pytest.mark.parametrize("name", ["w.json", "w.json.gz"])
def test_write_biencoder_validates_and_leaves_no_file(tmp_path, name):
    path = tmp_path / name
    with pytest.raises(DataFormatError, match="answers"):
        write_biencoder(path, [_example(0), _example(1, answers=None)])
    assert not path.exists() and os.listdir(tmp_path) == []


def test_gzip_output_is_deterministic(tmp_path):
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    write_biencoder(a, [_example(0)])
    write_biencoder(b, [_example(0)])
    assert a.read_bytes() == b.read_bytes()


# ------------------------------------------------------------------------------- corpus tsv

@pytest.mark.parametrize("name", ["psgs.tsv", "psgs.tsv.gz"])
def test_corpus_tsv_round_trip(tmp_path, name):
    rows = [("1", 'Aaron ( or ; "Ahärôn") is a prophet', "Aaron"),
            ("2", "text with\ttab", 'Title "q"'),
            ("3", "", "Empty text")]
    path = tmp_path / name
    assert write_corpus_tsv(path, rows) == 3
    assert list(read_corpus_tsv(path, skip_bad=False)) == rows


def test_writers_refuse_line_breaks(tmp_path):
    """A record is one line: a line break would read back as a broken quote."""
    with pytest.raises(DataFormatError, match="record 1 .*field 'text': contains a line break"):
        write_corpus_tsv(tmp_path / "c.tsv", [("1", "a", "A"), ("2", "two\nlines", "B")])
    with pytest.raises(DataFormatError, match="field 'question': contains a line break"):
        write_qa_csv(tmp_path / "q.csv", [("who\r?", ["x"])])
    assert os.listdir(tmp_path) == []


def test_corpus_tsv_dpr_quoting(tmp_path):
    # As in DPR's psgs_w100.tsv: quoted text with doubled quotes, parsed by csv.reader.
    path = tmp_path / "psgs.tsv"
    path.write_text('id\ttext\ttitle\n1\t"Aaron ( or ; ""Ahärôn"") is"\tAaron\n2\tplain\tB\n',
                    encoding="utf-8")
    assert list(read_corpus_tsv(path)) == [("1", 'Aaron ( or ; "Ahärôn") is', "Aaron"),
                                           ("2", "plain", "B")]


def test_corpus_tsv_bad_rows(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_text("id\ttext\ttitle\n1\tok\tT\n2\tmissing title\n\tno id\tT\n4\tok\tT\n")
    report = SkipReport()
    assert [r[0] for r in read_corpus_tsv(path, report=report)] == ["1", "4"]
    assert report.count(str(path), "wrong column count") == 1
    assert report.count(str(path), "bad id") == 1
    with pytest.raises(DataFormatError) as info:
        list(read_corpus_tsv(path, skip_bad=False))
    err = info.value
    assert (err.record, err.record_kind) == (3, "line")
    assert "line 3" in str(err) and str(path) in str(err)


def test_corpus_tsv_a_quote_never_swallows_lines(tmp_path):
    """A quoted field ends with its line: the unbalanced line is the bad record, the next line
    is the next record, and line numbers are physical lines."""
    path = tmp_path / "psgs.tsv"
    path.write_text('id\ttext\ttitle\n1\t"two\nlines"\tT\n3\tthree\tT\nbad row\n')
    with pytest.raises(DataFormatError, match="line 2: field 'text': a double quote opens") as e:
        list(read_corpus_tsv(path, skip_bad=False))
    assert e.value.reason == "unbalanced quote"
    report = SkipReport()
    assert list(read_corpus_tsv(path, report=report)) == [("3", "three", "T")]
    assert sorted(report.counts.values()) == [1, 2] and report.count(reason="unbalanced quote") == 1


# ------------------------------------------------------------------------------- qa csv

@pytest.mark.parametrize("name", ["nq-test.qa.csv", "nq-test.qa.csv.gz"])
def test_qa_csv_round_trip(tmp_path, name):
    rows = [("who got the first nobel prize in physics", ["Wilhelm Conrad R\u00f6ntgen"]),
            ('when was "the office" aired', ["March 24, 2005", "it's \"quoted\""]),
            ("no answers?", [])]
    path = tmp_path / name
    assert write_qa_csv(path, rows) == 3
    assert list(read_qa_csv(path, skip_bad=False)) == rows


def test_qa_csv_reads_dpr_lines(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text("who sang it\t['Jim Croce']\nregex q\t['Baltimore\\\\s*Orioles']\n",
                    encoding="utf-8")
    assert list(read_qa_csv(path)) == [("who sang it", ["Jim Croce"]),
                                       ("regex q", ["Baltimore\\s*Orioles"])]


def test_qa_csv_malicious_literal_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "q.csv"
    path.write_text(f"q1\t__import__('os').system('touch {marker}')\n"
                    f"q2\t[__import__('os')]\n"
                    f"q3\t'just a string'\n"
                    f"q4\t[1, 2]\n"
                    f"q5\t['ok']\n")
    report = SkipReport()
    assert list(read_qa_csv(path, report=report)) == [("q5", ["ok"])]
    assert not marker.exists()
    assert report.count(str(path), "bad answers") == 4
    with pytest.raises(DataFormatError) as info:
        list(read_qa_csv(path, skip_bad=False))
    assert (info.value.record, info.value.field) == (1, "answers")
    assert "line 1" in str(info.value) and "'answers'" in str(info.value)


def test_qa_csv_missing_column(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text("only a question\n")
    with pytest.raises(DataFormatError, match="at least 2"):
        list(read_qa_csv(path, skip_bad=False))


def test_write_qa_csv_rejects_non_list(tmp_path):
    with pytest.raises(TypeError):
        write_qa_csv(tmp_path / "q.csv", [("q", "a string")])


# ------------------------------------------------------------------------------- gold info

def _gold(i, **overrides):
    d = {"question": f"q{i}", "question_tokens": f"q{i}", "title": f"T{i}",
         "context": f"<P> context {i} </P>", "example_id": 1000 + i}
    d.update(overrides)
    return d


@pytest.mark.parametrize("name", ["g.json", "g.json.gz"])
def test_gold_info_round_trip(tmp_path, name):
    records = [_gold(i) for i in range(3)]
    path = tmp_path / name
    assert write_gold_info(path, records) == 3
    assert list(read_gold_info(path, skip_bad=False, chunk_size=5)) == records


def test_gold_info_other_keys_and_bad_records(tmp_path):
    obj = {"version": {"nested": [1, 2]},
           "data": [_gold(0), _gold(1, context=None), {"title": "t", "context": "c"}, _gold(3)],
           "tail": "x"}
    path = _write_json(tmp_path / "g.json", obj)
    report = SkipReport()
    got = list(read_gold_info(path, report=report, chunk_size=3))
    assert [g["question"] for g in got] == ["q0", "q3"]
    assert report.count(str(path), "bad context") == 1
    assert report.count(str(path), "missing question") == 1
    with pytest.raises(DataFormatError) as info:
        list(read_gold_info(path, skip_bad=False))
    assert (info.value.record, info.value.field) == (1, "context")


def test_gold_info_missing_data(tmp_path):
    path = _write_json(tmp_path / "g.json", {"version": 1})
    with pytest.raises(DataFormatError, match='"data"'):
        list(read_gold_info(path))


# ------------------------------------------------------------------------------- SkipReport

def test_skip_report_summary_and_log(caplog):
    report = SkipReport(max_examples=1)
    assert report.total == 0 and "none" in report.summary()
    report.add("a.json", "bad x", "first")
    report.add("a.json", "bad x", "second")
    report.add("b.json", "bad y")
    assert report.total == 3 and report.count("a.json") == 2 and report.count(reason="bad y") == 1
    assert "first" in report.summary() and "second" not in report.summary()
    with caplog.at_level("WARNING"):
        report.log()
    assert "a.json: bad x: 2" in caplog.text
