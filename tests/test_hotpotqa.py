"""HotpotQA reader, hop order, corpus writer and downloads (dense_cf/datasets/hotpotqa.py).

Records are written by hand here; downloads go to the localhost fixture server of
test_download.py. Nothing reaches the internet.
"""

from __future__ import annotations

import bz2
import dataclasses
import io
import json
import os
import tarfile

import pytest
import tensorflow_datasets as tfds
from test_download import FixtureServer

from dense_cf.cli import prepare_hotpot
from dense_cf.datasets import download, formats, hotpot_tfds, hotpotqa
from dense_cf.datasets.formats import DataFormatError
from dense_cf.datasets.hotpotqa import HotpotExample
from dense_cf.retrieval.corpus import load_corpus

FAST = download.DownloadOptions(chunk_size=64, backoff=0.0, max_retries=2, log_every=0.0,
                                timeout=10)

STRANGE = ["Doctor Strange (2016 film)",
           ["Doctor Strange is a 2016 American superhero film.",
            " It was directed by Scott Derrickson.", " It stars Benedict Cumberbatch."]]
DERRICKSON = ["Scott Derrickson",
              ["Scott Derrickson (born July 16, 1966) is an American director.",
               " He was born in Denver, Colorado.", " He lives in Los Angeles."]]
ED_WOOD = ["Ed Wood", ["Edward Davis Wood Jr. was an American filmmaker.",
                       " He was born in Poughkeepsie, New York."]]


def _bridge(**over) -> dict:
    rec = {"_id": "b1", "question": "Where was the director of Doctor Strange born?",
           "answer": "Denver, Colorado", "type": "bridge", "level": "hard",
           # second hop listed first, as HotpotQA often does
           "supporting_facts": [["Scott Derrickson", 1], ["Doctor Strange (2016 film)", 1]],
           "context": [ED_WOOD, DERRICKSON, STRANGE]}
    rec.update(over)
    return rec


def _comparison(**over) -> dict:
    rec = {"_id": "c1", "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
           "answer": "yes", "type": "comparison", "level": "medium",
           "supporting_facts": [["Scott Derrickson", 0], ["Ed Wood", 0]],
           "context": [DERRICKSON, ED_WOOD]}
    rec.update(over)
    return rec


def _write(path, records) -> str:
    """A JSON list; a str element is written verbatim (for JSON a dict cannot hold)."""
    parts = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("[" + ",\n".join(parts) + "]", encoding="utf-8")
    return str(path)


def test_example_accessors(tmp_path):
    (ex,), skipped = hotpotqa.read_hotpot(_write(tmp_path / "a.json", [_bridge()]))
    assert not skipped
    assert ex.id == "b1" and ex.type == "bridge" and ex.level == "hard"
    assert ex.supporting_titles == ("Scott Derrickson", "Doctor Strange (2016 film)")
    assert ex.supporting_facts == (("Scott Derrickson", 1), ("Doctor Strange (2016 film)", 1))
    # HotpotQA sentences carry their own leading spaces: concatenation, no added separator
    assert ex.passage("Scott Derrickson") == ("Scott Derrickson (born July 16, 1966) is an "
                                              "American director. He was born in Denver, "
                                              "Colorado. He lives in Los Angeles.")
    assert ex.supporting_sentences("Scott Derrickson") == (1,)
    assert ex.supporting_sentences("Ed Wood") == ()
    assert ex.counterfactual("Scott Derrickson") == ("Scott Derrickson (born July 16, 1966) is "
                                                     "an American director. He lives in Los Angeles.")
    with pytest.raises(KeyError, match="no context paragraph titled 'Nope'"):
        ex.passage("Nope")


def test_malformed_records_are_skipped_and_counted_by_reason(tmp_path):
    ctx = [DERRICKSON, STRANGE]
    bad = [
        "42",                                                              # not an object
        _bridge(_id="m1", question=5),                                     # wrong type
        {k: v for k, v in _bridge(_id="m2").items() if k != "question"},   # missing field
        _bridge(_id="m3", type="multi"),                                   # bad enum
        _bridge(_id="m4", supporting_facts=[["Nobody", 0], ["Scott Derrickson", 1]]),
        _bridge(_id="m5", supporting_facts=[["Scott Derrickson", 3], [STRANGE[0], 1]]),
        _bridge(_id="m6", supporting_facts=[["Scott Derrickson"], [STRANGE[0], 1]]),
        _bridge(_id="m7", supporting_facts=[["Scott Derrickson", 1]]),    # one title
        _bridge(_id="m8", context=ctx + [DERRICKSON]),                     # repeated title
        _bridge(_id="m9", context=[["Scott Derrickson", ["ok", 7]], STRANGE]),
        '{"_id": "m10", "_id": "m10b", "question": "q"}',                   # repeated key
        _bridge(),                                                         # b1 again
        _bridge(_id="m11", supporting_facts=[["Scott Derrickson", True], [STRANGE[0], 1]]),
    ]
    path = _write(tmp_path / "bad.json", [_bridge(), _comparison()] + bad)
    examples, skipped = hotpotqa.read_hotpot(path)
    assert [e.id for e in examples] == ["b1", "c1"]
    assert skipped == {
        "bad <record>": 1, "bad question": 1, "missing question": 1, "bad type": 1,
        "support title not in context": 1, "support index out of range": 1,
        "bad supporting_facts[]": 2, "not two supporting titles": 1,
        "duplicate context title": 1, "bad context[].sentences[]": 1, "duplicate key": 1,
        "duplicate _id": 1}
    assert sum(skipped.values()) == len(bad)


def test_strict_names_file_record_id_and_field(tmp_path):
    recs = [_bridge(), _bridge(_id="x9", supporting_facts=[["Scott Derrickson", 5],
                                                           [STRANGE[0], 1]])]
    path = _write(tmp_path / "strict.json", recs)
    with pytest.raises(ValueError) as info:
        hotpotqa.read_hotpot(path, strict=True)
    msg = str(info.value)
    assert isinstance(info.value, DataFormatError)
    for part in (path, "record 1 (0-based index)", "'supporting_facts[0]'", "_id 'x9'",
                 "sentence index 5 out of range", "has 3 sentence(s)"):
        assert part in msg, msg
    path = _write(tmp_path / "strict2.json", [{"_id": "q7", "question": "q", "context": []}])
    with pytest.raises(ValueError, match=r"record 0 .*field 'answer': _id 'q7': missing"):
        hotpotqa.read_hotpot(path, strict=True)


def test_test_set_and_fullwiki_options(tmp_path):
    test_rec = {"_id": "t1", "question": "Who?", "context": [DERRICKSON]}
    path = _write(tmp_path / "test.json", [test_rec])
    (ex,), skipped = hotpotqa.read_hotpot(path, require_labels=False)
    assert not skipped and ex.answer == "" and ex.type == "" and ex.supporting_facts == ()
    with pytest.raises(DataFormatError, match="no valid records: 1 record.*missing answer"):
        hotpotqa.read_hotpot(path)
    # full-wiki dev: the context is a retrieval result and may lack a gold paragraph
    full = _write(tmp_path / "full.json", [_comparison(), _bridge(context=[ED_WOOD, DERRICKSON])])
    assert hotpotqa.read_hotpot(full)[1] == {"support title not in context": 1}
    (_, ex), _ = hotpotqa.read_hotpot(full, support_in_context=False)
    assert ex.supporting_titles == ("Scott Derrickson", STRANGE[0])


def test_truncated_file_always_raises(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text(json.dumps([_bridge(), _comparison()])[:-30], encoding="utf-8")
    with pytest.raises(DataFormatError, match="truncated"):
        hotpotqa.read_hotpot(path)


def test_write_hotpot_round_trip(tmp_path):
    src = _write(tmp_path / "src.json", [_bridge(), _comparison()])
    examples, _ = hotpotqa.read_hotpot(src)
    out = tmp_path / "out.json.gz"
    assert hotpotqa.write_hotpot(out, examples) == 2
    assert hotpotqa.read_hotpot(out)[0] == examples
    bad = dataclasses.replace(examples[0], supporting_facts=(("Nobody", 0), ("Ed Wood", 0)))
    with pytest.raises(DataFormatError, match="not a context title"):
        hotpotqa.write_hotpot(tmp_path / "bad.json", [bad])
    assert not (tmp_path / "bad.json").exists()


def _ex(a: list, b: list, answer: str, qtype: str = "bridge") -> HotpotExample:
    return HotpotExample("e", "q?", answer, qtype, ((a[0], 0), (b[0], 0)),
                         ((a[0], tuple(a[1])), (b[0], tuple(b[1]))))


def test_bridge_order_rules():
    # 1. the passage naming the other title, whose own title is not in the answer, comes first
    e = _ex(DERRICKSON, STRANGE, "Denver, Colorado")
    assert hotpotqa.bridge_order(e) == (STRANGE[0], "Scott Derrickson")
    assert hotpotqa.bridge_order_rule(e) == "answer_and_mention"
    # both name each other: the one whose title is the answer goes second
    kings = ["Sacramento Kings", ["The Sacramento Kings drafted Buddy Hield in 2018."]]
    hield = ["Buddy Hield", ["Buddy Hield plays for the Sacramento Kings."]]
    e = _ex(kings, hield, "the Sacramento Kings")
    assert hotpotqa.bridge_order(e) == ("Buddy Hield", "Sacramento Kings")
    assert hotpotqa.bridge_order_rule(e) == "answer_and_mention"
    # 2. both titles in the answer: mention decides
    e = _ex(DERRICKSON, STRANGE, "Scott Derrickson's Doctor Strange")
    assert hotpotqa.bridge_order_rule(e) == "mention"
    assert hotpotqa.bridge_order(e) == (STRANGE[0], "Scott Derrickson")
    # 3. neither mentions the other: the title that is not the answer comes first
    e = _ex(["Ed Wood", ["A filmmaker."]], ["Tim Burton", ["A director."]], "Ed Wood")
    assert hotpotqa.bridge_order(e) == ("Tim Burton", "Ed Wood")
    assert hotpotqa.bridge_order_rule(e) == "answer"
    # 4. nothing singles one out: dataset order (first appearance in supporting_facts)
    e = _ex(["Ed Wood", ["A filmmaker."]], ["Tim Burton", ["A director."]], "1994")
    assert hotpotqa.bridge_order(e) == ("Ed Wood", "Tim Burton")
    assert hotpotqa.bridge_order_rule(e) == "dataset_order"
    # whole words only: "Ed" is not mentioned by "edited"
    e = _ex(["Ed", ["A film."]], ["Zed", ["It was edited in 1994."]], "1994")
    assert hotpotqa.bridge_order_rule(e) == "dataset_order"
    # comparison: dataset order; texts from a corpus when the context lacks the paragraph
    assert hotpotqa.bridge_order(_ex(DERRICKSON, ED_WOOD, "yes", "comparison")) == (
        "Scott Derrickson", "Ed Wood")
    e = HotpotExample("f", "q?", "Denver", "bridge", (("Scott Derrickson", 1), (STRANGE[0], 1)),
                      ((ED_WOOD[0], tuple(ED_WOOD[1])),))
    assert hotpotqa.bridge_order(e) == ("Scott Derrickson", STRANGE[0])  # no texts: fallback
    texts = {STRANGE[0]: "".join(STRANGE[1]), "Scott Derrickson": "".join(DERRICKSON[1])}
    assert hotpotqa.bridge_order(e, texts) == (STRANGE[0], "Scott Derrickson")
    assert hotpotqa.bridge_order_rule(e, texts) == "answer_and_mention"
    with pytest.raises(ValueError, match="expected 2 supporting titles"):
        hotpotqa.bridge_order(dataclasses.replace(e, supporting_facts=(("Ed Wood", 0),)))


def test_corpus_round_trip_through_the_corpus_reader(tmp_path):
    examples, _ = hotpotqa.read_hotpot(_write(tmp_path / "a.json", [_bridge(), _comparison()]))
    out = tmp_path / "corpus.tsv"
    extra = [("Ed Wood", "A different text."), ("New Title", ["One.", " Two\nlines."]),
             ("Empty", ["  "])]
    n, counts = hotpotqa.write_corpus(list(examples) + extra, out)
    assert n == 4
    assert counts == {"duplicate title": 2, "conflicting title": 1, "empty text": 1,
                      "line break replaced": 1}
    corpus = load_corpus(str(out))
    assert corpus.ids == ["1", "2", "3", "4"]
    assert corpus.titles == ["Ed Wood", "Scott Derrickson", STRANGE[0], "New Title"]
    for title, text in zip(corpus.titles[:3], corpus.texts):
        assert text == examples[0].passage(title)   # the first text of a title is kept
    assert corpus.texts[3] == "One. Two lines."
    assert hotpotqa.corpus_titles(out) == {"Ed Wood": "1", "Scott Derrickson": "2",
                                           STRANGE[0]: "3", "New Title": "4"}


def _bz2_lines(lines: list) -> bytes:
    return bz2.compress("".join((x if isinstance(x, str) else json.dumps(x)) + "\n"
                                for x in lines).encode())


def _abstracts(tmp_path):
    members = {
        "enwiki/AA/wiki_00.bz2": _bz2_lines([
            {"id": "12", "url": "u", "title": "Anarchism",
             "text": ["Anarchism is a political philosophy.", " It rejects the state."]},
            {"id": "13", "url": "u", "title": "Empty page", "text": []},
            "not json"]),
        "enwiki/AB/wiki_00.bz2": _bz2_lines([
            {"id": "14", "url": "u", "title": "Scott Derrickson", "text": DERRICKSON[1]},
            {"id": "15", "url": "u", "title": "Bad", "text": [["nested", "paragraph"]]}]),
    }
    tar_path = tmp_path / "abstracts.tar.bz2"
    with tarfile.open(tar_path, "w:bz2") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    for name, data in members.items():
        p = tmp_path / "extracted" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return tar_path, tmp_path / "extracted"


def test_wiki_abstracts_to_corpus(tmp_path):
    tar_path, extracted = _abstracts(tmp_path)
    report = formats.SkipReport()
    from_tar = list(hotpotqa.iter_wiki_abstracts(tar_path, report=report))
    assert from_tar == [("Anarchism", ("Anarchism is a political philosophy.",
                                       " It rejects the state.")),
                        ("Scott Derrickson", tuple(DERRICKSON[1]))]
    assert report.count(reason="empty text") == 1 and report.count(reason="invalid JSON") == 1
    assert report.count(reason="bad text") == 1
    assert f"{tar_path}:enwiki/AB/wiki_00.bz2: line 2: field 'text'" in report.summary()
    assert list(hotpotqa.iter_wiki_abstracts(extracted)) == from_tar
    with pytest.raises(DataFormatError, match="line 2: field 'text': no intro text"):
        list(hotpotqa.iter_wiki_abstracts(tar_path, strict=True))
    n, counts = hotpotqa.wiki_corpus(tar_path, tmp_path / "wiki.tsv")
    assert n == 2 and counts == {"empty text": 1, "invalid JSON": 1, "bad text": 1}
    assert list(formats.read_corpus_tsv(tmp_path / "wiki.tsv")) == [
        ("1", "Anarchism is a political philosophy. It rejects the state.", "Anarchism"),
        ("2", "".join(DERRICKSON[1]), "Scott Derrickson")]


@pytest.fixture
def server(tmp_path, monkeypatch):
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(var, "127.0.0.1,localhost")
    train = json.dumps([_bridge(), _comparison()]).encode()
    dev = json.dumps([_comparison(_id="d1")]).encode()
    srv = FixtureServer({"/hotpot/hotpot_train_v1.1.json": train,
                         "/hotpot/hotpot_dev_distractor_v1.json": dev,
                         "/hotpot/enwiki-20171001-pages-meta-current-withlinks-abstracts.tar.bz2":
                             _abstracts(tmp_path)[0].read_bytes()})
    yield srv
    srv.close()


def test_download_resumes_and_reads(server, tmp_path):
    server.set(mode="drop_once", drop_at=100, send_etag=True)
    data_dir = str(tmp_path / "data")
    paths = hotpotqa.prepare(data_dir, "train,dev_distractor", base_url=server.url("/hotpot/"),
                             opts=FAST)
    assert set(paths) == {"hotpot_train_v1.1.json", "hotpot_dev_distractor_v1.json"}
    resumed = [r for r in server.requests if r["range"]]
    assert {r["range"] for r in resumed} == {"bytes=100-"}     # each file resumed at the cut
    examples, skipped = hotpotqa.read_hotpot(paths["hotpot_train_v1.1.json"])
    assert [e.id for e in examples] == ["b1", "c1"] and not skipped
    store = download.ChecksumStore(data_dir)
    assert store.get("hotpot_train_v1.1.json").size == os.path.getsize(
        paths["hotpot_train_v1.1.json"])
    server.reset_log()
    hotpotqa.prepare(data_dir, "train", base_url=server.url("/hotpot/"), opts=FAST)
    assert server.requests == []                                  # present and verified


def test_pinned_wiki_checksum_refuses_other_bytes(server, tmp_path):
    # The wiki archive's size and md5 are pinned: the fixture's tiny tarball is not it.
    with pytest.raises(download.ChecksumError, match="size: expected 1553565403"):
        hotpotqa.prepare(str(tmp_path / "d"), "wiki", base_url=server.url("/hotpot/"), opts=FAST)
    assert not os.path.exists(tmp_path / "d" / hotpotqa.RESOURCES["wiki"].name)


def test_registry_and_cli(server, tmp_path, monkeypatch, capsys):
    assert [r.key for r in hotpotqa.select("all")] == list(hotpotqa.SPLITS)
    with pytest.raises(ValueError, match="unknown HotpotQA split"):
        hotpotqa.select("train,nope")
    assert hotpotqa.RESOURCES["train"].url == (
        "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_train_v1.1.json")
    assert prepare_hotpot.run_cli(["--list", "--splits=dev_fullwiki"]) == 0
    assert "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_fullwiki_v1.json" in \
        capsys.readouterr().out
    # --corpus with the fixture archive (its pinned checksum lifted for the test)
    wiki = dataclasses.replace(hotpotqa.RESOURCES["wiki"], size=None, md5=None)
    monkeypatch.setitem(hotpotqa.RESOURCES, "wiki", wiki)
    data_dir = tmp_path / "cli"
    assert prepare_hotpot.run_cli([f"--data_dir={data_dir}", "--splits=train,wiki", "--corpus",
                                   f"--base_url={server.url('/hotpot/')}", "--retries=1"]) == 0
    out = capsys.readouterr().out
    assert f"{data_dir / hotpotqa.CORPUS_FILE}: 2 passages" in out
    assert len(load_corpus(str(data_dir / hotpotqa.CORPUS_FILE))) == 2


def test_tfds_builder_from_server_keeps_the_nested_records(server, tmp_path):
    # hotpot_retriever/distractor: downloaded from the localhost mirror, read back as TFDS with
    # the supporting facts and the context paragraphs' sentences intact; bad records counted.
    bad = json.dumps([_bridge(), _comparison(), _comparison(_id="x", supporting_facts=[["Nope", 0]])])
    server._srv.files["/hotpot/hotpot_train_v1.1.json"] = bad.encode()
    builder = hotpot_tfds.HotpotRetriever(config="distractor", data_dir=str(tmp_path / "tfds"),
                                          base_url=server.url("/hotpot/"), download_options=FAST)
    builder.download_and_prepare()
    train = list(tfds.as_numpy(builder.as_dataset(split="train", shuffle_files=False)))
    assert sorted(r["id"].decode() for r in train) == ["b1", "c1"]   # "x" skipped, counted
    b1 = next(r for r in train if r["id"] == b"b1")
    assert [t.decode() for t in b1["supporting_facts"]["title"]] == [
        "Scott Derrickson", "Doctor Strange (2016 film)"]
    assert list(b1["supporting_facts"]["sent_id"]) == [1, 1]
    assert [t.decode() for t in b1["context"]["title"]] == [ED_WOOD[0], DERRICKSON[0], STRANGE[0]]
    sents = b1["context"]["sentences"]   # a ragged [paragraphs, sentences] value
    sents = sents.to_list() if hasattr(sents, "to_list") else sents
    assert [s.decode() for s in sents[1]] == DERRICKSON[1] and len(sents[0]) == len(ED_WOOD[1])
    assert b1["answer"] == b"Denver, Colorado" and b1["type"] == b"bridge"
    dev = list(tfds.as_numpy(builder.as_dataset(split="validation")))
    assert [r["id"] for r in dev] == [b"d1"]
    ex = HotpotExample("i", "q", "a", "bridge", (("T", 0),), (("T", ("s.",)),))
    assert hotpot_tfds.example_features(ex)["context"] == {"title": ["T"], "sentences": [["s."]]}
