// Values from outside are text: a cluster discovered under the name
// `<img src=x onerror=…>` and a plugin refused with `<script>…</script>` in its message run
// no script. The page's own Content-Security-Policy is checked too, with a positive control:
// an inline script added on purpose is refused and reported.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import test from 'node:test';
import { allOnline, scenario, screenshot, until } from '../lib/harness.mjs';

const evilCluster = '<img src=x onerror=window.__xss=1>';
const evilDir = '<script>window.__xss=2</script>';

test('names and messages from outside run no script', { timeout: 300000 }, async () => {
  await scenario('xss', {
    clusters: 3,
    // A kubeconfig whose context bears the hostile name, beside the fleet's own; a plugin
    // directory whose path holds a script tag, with a file that is not a plugin in it.
    prepare: ({ work, fleet }) => {
      const text = fs.readFileSync(path.join(fleet.kubeconfigs, 'cluster-00000.yaml'), 'utf8');
      const quoted = `'${evilCluster}'`;
      const evil = text.replace('contexts:\n- name: cluster-00000\n', `contexts:\n- name: ${quoted}\n`)
        .replace('current-context: cluster-00000', `current-context: ${quoted}`);
      assert.notEqual(evil, text);
      fs.writeFileSync(path.join(fleet.kubeconfigs, 'hostile.yaml'), evil);
      const plugins = path.join(work, 'plug', evilDir);
      fs.mkdirSync(plugins, { recursive: true });
      fs.writeFileSync(path.join(plugins, 'broken.wasm'), 'not a plugin');
    },
    env: (work) => ({ VIGIL_PLUGIN_DIR: path.join(work, 'plug', evilDir) }),
  }, async ({ vigil, open }) => {
    await allOnline(vigil, 4);
    const { page, record } = await open();
    const response = await page.goto(`${vigil.base}/`);
    const headers = response.headers();
    assert.match(headers['content-security-policy'], /default-src 'self'; script-src 'self'; style-src 'self'/);
    assert.match(headers['content-security-policy'], /frame-ancestors 'none'; base-uri 'none'; form-action 'self'/);
    assert.equal(headers['x-content-type-options'], 'nosniff');
    assert.equal(headers['referrer-policy'], 'no-referrer');

    await page.waitForSelector('#fleet[data-rows-rendered]');
    const link = page.locator('#fleet tbody th a').filter({ hasText: 'onerror' });
    assert.equal(await link.textContent(), evilCluster);
    assert.equal(await page.locator('#fleet img').count(), 0);
    await link.click();
    await page.waitForSelector('main h1 .status');
    assert.match(await page.locator('main h1').textContent(), /^<img src=x onerror=window.__xss=1>/);
    assert.equal(await page.locator('main img').count(), 0);
    await screenshot(page, 'xss-cluster');

    await page.click('#nav-plugins');
    await page.waitForSelector('#plugins tr[data-plugin="broken"]');
    const failure = await page.locator('#plugins tr[data-plugin="broken"] .failure').textContent();
    assert.ok(failure.includes(`${evilDir}/broken.wasm`), failure);
    assert.match(failure, /stage compile/);
    assert.equal(await page.locator('main script').count(), 0);
    await screenshot(page, 'xss-plugins');

    assert.equal(await page.evaluate(() => window.__xss), undefined, 'a hostile value ran as script');
    assert.deepEqual(record.violations, [], 'the page itself broke its policy');
    // (A 404 is logged for the endpoints an older vigil lacks, which the page does without.)
    assert.deepEqual(record.console.filter((m) => m.startsWith('error') && !/status of 404/.test(m)), []);

    // Positive control: the policy refuses an inline script, and the check sees it.
    await page.evaluate(() => {
      const s = document.createElement('script');
      s.textContent = 'window.__inline = 1';
      document.body.append(s);
    });
    await until('the inline script is reported as a violation', () => record.violations.length > 0, 10000);
    assert.equal(await page.evaluate(() => window.__inline), undefined);
    assert.equal(record.violations.length, 1);
    assert.match(record.violations[0], /^script-src/);
  });
});
