#!/usr/bin/env node
// unicode.js asks Hugging Face tokenizers' regex engine (Oniguruma, inside
// the npm "tokenizers" binding) which code points each Unicode class used
// by the pre-tokenizer patterns contains, and writes the answer to
// engine/tokenizer/testdata/unicode_classes.json as code point ranges.
// Oniguruma's Unicode tables are newer than Go's unicode package, so
// tables/main.go turns the difference into engine/tokenizer/unicode_tables.go.
// See README.md.
'use strict';

const fs = require('fs');
const path = require('path');

let modules = path.join(__dirname, 'node_modules');
let out = path.resolve(__dirname, '../../engine/tokenizer/testdata/unicode_classes.json');
for (let i = 2; i < process.argv.length; i++) {
  if (process.argv[i] === '--modules') modules = path.resolve(process.argv[++i]);
  else if (process.argv[i] === '--out') out = path.resolve(process.argv[++i]);
  else throw new Error(`unknown argument ${process.argv[i]}`);
}
const { Tokenizer } = require(path.join(modules, 'tokenizers'));
const version = require(path.join(modules, 'tokenizers', 'package.json')).version;

// Each class is probed by splitting a string of every code point with the
// complement class in "Removed" mode: what survives is the class.
const classes = {
  L: '\\P{L}', N: '\\P{N}', Nd: '\\P{Nd}', Lu: '\\P{Lu}', Ll: '\\P{Ll}', Lt: '\\P{Lt}', Lm: '\\P{Lm}',
  Lo: '\\P{Lo}', M: '\\P{M}', P: '\\P{P}', Pc: '\\P{Pc}', S: '\\P{S}', Space: '\\S',
};

let all = '';
for (let cp = 0; cp <= 0x10ffff; cp++) {
  if (cp >= 0xd800 && cp <= 0xdfff) continue;
  all += String.fromCodePoint(cp);
}

const result = { source: `npm tokenizers@${version} (Oniguruma), probed by tools/tokgolden/unicode.js`, classes: {} };
for (const [name, complement] of Object.entries(classes)) {
  const json = {
    version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: { type: 'Split', pattern: { Regex: complement }, behavior: 'Removed', invert: false },
    post_processor: null, decoder: null, model: { type: 'BPE', vocab: { a: 0 }, merges: [] },
  };
  const pieces = Tokenizer.fromString(JSON.stringify(json)).getPreTokenizer().preTokenizeString(all);
  const ranges = [];
  for (const [piece] of pieces) {
    for (const ch of piece) {
      const c = ch.codePointAt(0);
      const last = ranges[ranges.length - 1];
      if (last && last[1] === c - 1) last[1] = c;
      else ranges.push([c, c]);
    }
  }
  result.classes[name] = ranges;
}
fs.writeFileSync(out, JSON.stringify(result) + '\n');
console.log(`wrote ${out}`);
