// axe finds no WCAG 2.x A or AA violation on the fleet, a cluster (with an outage, a degraded
// app and conditions), a cluster with drain findings and the plugins, in the light and the dark colour scheme; the page is
// usable from the keyboard (a visible focus ring on links and buttons).

import assert from 'node:assert/strict';
import test from 'node:test';
import AxeBuilder from '@axe-core/playwright';
import { allOnline, scenario, screenshot, until } from '../lib/harness.mjs';

const victim = 'cluster-00001';
const audited = 'cluster-00002';

async function axe(page, where) {
  const result = await new AxeBuilder({ page }).withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']).analyze();
  const found = result.violations.map((v) => `${where}: ${v.id} (${v.impact}) ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')}`);
  assert.deepEqual(found, [], found.join('\n'));
  assert.ok(result.passes.length > 10, 'axe ran its checks');
}

test('no WCAG AA violation, light and dark', { timeout: 300000 }, async () => {
  // Every fake cluster serves the objects of fixtures/basic, whose `data/db` budget allows no
  // disruption: the built-in pdb-audit plugin reports it.
  await scenario('a11y', {
    clusters: 8, fixtures: 'tests/fake-kube/fixtures/basic', env: { CLUSTER_HEALTH_INTERVAL: '1' },
  }, async ({ fleet, vigil, open }) => {
    await allOnline(vigil, 8);
    await vigil.api('POST', '/api/v1/apps', { name: 'shop', cluster: victim });
    await vigil.api('POST', '/api/v1/deployments', { app: 'shop', version: '1.0.0' });
    await vigil.api('PATCH', `/api/v1/clusters/${victim}`, { labels: { team: 'payments' } });
    // Each ONLINE cluster is audited once soon after it came ONLINE (then hourly), two at a
    // time: every first audit is recorded before the victim goes OFFLINE (and is audited no
    // more), so that every cluster's page shows the same findings from run to run.
    await until('the first drain audit of every cluster', async () => {
      for (const { name } of await vigil.clusters()) {
        if ((await vigil.api('GET', `/api/v1/clusters/${name}/findings`)).findings.length === 0) return false;
      }
      return true;
    }, 60000);
    await fleet.refuse(victim);

    for (const colorScheme of ['light', 'dark']) {
      const { page } = await open({ colorScheme });
      await page.goto(`${vigil.base}/`);
      await page.waitForSelector(`#fleet tbody tr[data-cluster="${victim}"][data-status="OFFLINE"]`, { timeout: 60000 });
      await page.waitForSelector('#connection[data-state="live"]');
      await axe(page, `fleet (${colorScheme})`);

      // Keyboard: the first Tab reaches the skip link, the next ones links with a visible ring.
      await page.keyboard.press('Tab');
      assert.equal(await page.evaluate(() => document.activeElement.className), 'skip');
      await page.keyboard.press('Tab');
      const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
      assert.equal(outline, 'solid');
      await screenshot(page, `a11y-fleet-${colorScheme}`);

      await page.goto(`${vigil.base}/#/cluster/${victim}`);
      await page.waitForSelector('#outages tr[data-open="true"]');
      await axe(page, `cluster (${colorScheme})`);
      await screenshot(page, `a11y-cluster-${colorScheme}`);

      // Drain findings, each with its fix, on the page of the cluster navigated to: until it
      // is drawn, the page of the cluster left (findings too) is still there. It must stay,
      // though the cluster left keeps sending events (each failed probe).
      await page.goto(`${vigil.base}/#/cluster/${audited}`);
      await page.waitForFunction((name) => document.querySelector('main h1')?.textContent.startsWith(`${name} `)
        && document.querySelector('#findings li'), audited);
      const shows = async () => (await page.locator('main h1').textContent()).split(' ')[0];
      assert.equal(await shows(), audited);
      const findings = await page.locator('#findings').textContent();
      assert.match(findings, /blocking/);
      assert.match(findings, /PodDisruptionBudget data\/db/);
      assert.match(findings, /Fix: /);
      await axe(page, `cluster with findings (${colorScheme})`);
      await screenshot(page, `a11y-findings-${colorScheme}`);
      assert.equal(await shows(), audited);

      await page.goto(`${vigil.base}/#/plugins`);
      await page.waitForSelector('#plugins tr[data-plugin]');
      await axe(page, `plugins (${colorScheme})`);
      await screenshot(page, `a11y-plugins-${colorScheme}`);
      await page.context().close();
    }
  });
});
