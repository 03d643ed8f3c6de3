#!/usr/bin/env node
// scanprobe.js prints the Go table of TestScanners (engine/tokenizer/scanner_test.go):
// how HF tokenizers' Split pre-tokenizer (Isolated) cuts sample texts with
// each supported pattern. Usage: node scanprobe.js [--modules DIR]
'use strict';
const path = require('path');
const mi = process.argv.indexOf('--modules');
const modules = mi > 0 ? path.resolve(process.argv[mi + 1]) : path.join(__dirname, 'node_modules');
const { Tokenizer } = require(path.join(modules, 'tokenizers'));
const P = {
  GPT2: "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
  CL100K: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  Qwen2: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  O200K: "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  DeepSeek: "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};
const texts = {
  GPT2: ["Hello world", "I'm here", "  x", " 123abc", "a\t\tb", "x  \n  y", "don'T"],
  CL100K: ["\t\t}\n", "Hello world 12345", " 123", "I'M they'Ll x'ſab", "a \n\n b", "foo  bar", "x'y", "$hello", "\r\nend\r\n"],
  Qwen2: ["123", "v1.25", "  \tx"],
  O200K: ["HelloWorld", "HELLOworld's", "foo/bar//\n", " ABC def", "a\u0301b\u0301C", "ǅx'S", "ʰello", "12345"],
  DeepSeek: ["hello,world", ".NET and ,x", " 123 abc", "a\u200db", "café!!\n", "x  y"],
};
for (const [name, pat] of Object.entries(P)) {
  const j={version:'1.0',truncation:null,padding:null,added_tokens:[],normalizer:null,pre_tokenizer:{type:'Split',pattern:{Regex:pat},behavior:'Isolated',invert:false},post_processor:null,decoder:null,model:{type:'BPE',vocab:{a:0},merges:[]}};
  const p=Tokenizer.fromString(JSON.stringify(j)).getPreTokenizer();
  for (const t of texts[name]) console.log(`{Pattern${name}, ${JSON.stringify(t)}, []string{${p.preTokenizeString(t).map(x=>JSON.stringify(x[0])).join(', ')}}},`);
}
