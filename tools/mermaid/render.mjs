// Render mermaid blocks with mermaid itself, in headless Chromium.
//
//   node tools/mermaid/render.mjs BLOCKS.json OUT_DIR
//
// BLOCKS.json: [{"name": "eagle-fast-verify-1", "source": "xychart-beta\n..."}].
// For each block: mermaid.parse, then mermaid.render; the SVG goes to
// OUT_DIR/NAME.svg and a screenshot of it to OUT_DIR/NAME.png. Prints one
// JSON line per block: {"name", "ok", "error", "version"}; exits 1 if any failed.
// Chromium: $CHROMIUM, else /usr/bin/chromium (Debian's package).
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const [blocksFile, outDir] = process.argv.slice(2);
const blocks = JSON.parse(readFileSync(blocksFile, "utf8"));
mkdirSync(outDir, { recursive: true });
const version = JSON.parse(readFileSync(join(here, "node_modules/mermaid/package.json"), "utf8")).version;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu"],
});
let failed = 0;
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 700 }, deviceScaleFactor: 1 });
  await page.setContent("<!doctype html><html><body style='margin:0;background:#fff'><div id='out'></div></body></html>");
  await page.addScriptTag({ path: join(here, "node_modules/mermaid/dist/mermaid.min.js") });
  await page.evaluate(() => window.mermaid.initialize({ startOnLoad: false, securityLevel: "strict" }));
  for (const [i, block] of blocks.entries()) {
    const result = await page.evaluate(async ({ id, source }) => {
      try {
        await window.mermaid.parse(source);
        const { svg } = await window.mermaid.render(id, source);
        document.getElementById("out").innerHTML = svg;
        return { svg };
      } catch (e) {
        return { error: String(e && e.message ? e.message : e) };
      }
    }, { id: `chart${i}`, source: block.source });
    if (result.error) {
      failed += 1;
      console.log(JSON.stringify({ name: block.name, ok: false, error: result.error, version }));
      continue;
    }
    writeFileSync(join(outDir, `${block.name}.svg`), result.svg);
    await page.locator("#out svg").screenshot({ path: join(outDir, `${block.name}.png`) });
    console.log(JSON.stringify({ name: block.name, ok: true, error: null, version }));
  }
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
