#!/usr/bin/env python3
"""Document-level chrF of a translation against a reference, for `quire bench quality`.

    python benches/chrf.py --hypothesis OUT.md --reference REF.md

Scores the whole hypothesis file against the whole reference file as ONE segment
(`sacrebleu.corpus_chrf([hyp_doc], [[ref_doc]])`, default chrF: character 6-grams, beta 2,
no word n-grams, whitespace ignored), so the two files need not align line by line — a
document-level score, comparable between systems scored against the same reference.

Prints one JSON object: chrf (0-100), segmentation, the sacrebleu signature and version,
and the character counts of both files.
"""

import argparse
import json

import sacrebleu
from sacrebleu.metrics import CHRF


def main():
    ap = argparse.ArgumentParser(description="document-level chrF with sacrebleu")
    ap.add_argument("--hypothesis", required=True, help="the translation")
    ap.add_argument("--reference", required=True, help="the reference translation")
    args = ap.parse_args()
    with open(args.hypothesis, encoding="utf-8") as f:
        hyp = f.read()
    with open(args.reference, encoding="utf-8") as f:
        ref = f.read()
    metric = CHRF()
    score = metric.corpus_score([hyp], [[ref]])
    print(json.dumps({
        "chrf": round(score.score, 4),
        "segmentation": "document: the whole chapter as one segment",
        "signature": str(metric.get_signature()),
        "sacrebleu": sacrebleu.__version__,
        "hypothesis_chars": len(hyp),
        "reference_chars": len(ref),
    }, ensure_ascii=False))


if __name__ == "__main__":
    main()
