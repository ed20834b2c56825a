// Drives the reference's Web UI, served by vireo-server at BASE/ui, in headless Chromium
// (puppeteer-core over the machine's chromium): sign in, list streams, create a stream and a
// topic, then see a message (sent through the HTTP API: the UI has no form to send one) in the
// message browser. A screenshot of each step goes to SHOTS. Prints PASS and the screenshots, or
// FAIL and the step; every wait is bounded.
//   node ci/web-ui-drive.mjs BASE SHOTS CHROMIUM
import puppeteer from 'puppeteer-core';
import { mkdirSync } from 'node:fs';

const [base, shots, chromium] = process.argv.slice(2);
mkdirSync(shots, { recursive: true });
const WAIT = 20000;
const taken = [];

async function api(method, path, token, body) {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

async function shot(page, name) {
  const path = `${shots}/${name}.png`;
  await page.screenshot({ path, fullPage: true });
  taken.push(path);
}

async function clickButton(page, label) {
  await page.waitForFunction(
    (label) => [...document.querySelectorAll('button')].some((b) => b.textContent.trim().includes(label)),
    { timeout: WAIT },
    label,
  );
  await page.evaluate((label) => {
    const button = [...document.querySelectorAll('button')].find((b) => b.textContent.trim().includes(label));
    button.click();
  }, label);
}

// Lets a closing modal finish its animation before a screenshot.
const settle = () => new Promise((resolve) => setTimeout(resolve, 800));

async function waitForText(page, text) {
  await page.waitForFunction((text) => document.body.innerText.includes(text), { timeout: WAIT }, text);
}

let step = 'start the browser';
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 900 });

  step = 'sign in';
  await page.goto(`${base}/ui/`, { waitUntil: 'networkidle0', timeout: WAIT });
  await page.waitForSelector('input[name="username"]', { timeout: WAIT });
  await page.click('input[name="username"]', { clickCount: 3 });
  await page.type('input[name="username"]', 'iggy');
  await page.type('input[name="password"]', 'iggy');
  await shot(page, '1-sign-in');
  await page.click('button[type="submit"]');
  await page.waitForFunction(() => location.pathname.includes('/dashboard'), { timeout: WAIT });
  await page.waitForNetworkIdle({ timeout: WAIT }).catch(() => {});
  await shot(page, '2-signed-in');

  step = 'list streams';
  const token = (await api('POST', '/users/login', null, { username: 'iggy', password: 'iggy' })).access_token.token;
  await api('POST', '/streams', token, { name: 'listed-first' });
  await page.goto(`${base}/ui/dashboard/streams`, { waitUntil: 'networkidle0', timeout: WAIT });
  await waitForText(page, 'listed-first');
  await shot(page, '3-streams');

  step = 'create a stream';
  await clickButton(page, 'New stream');
  await page.waitForSelector('input[name="name"]', { timeout: WAIT });
  await page.type('input[name="name"]', 'ui-orders');
  await clickButton(page, 'Create');
  await waitForText(page, 'ui-orders');
  await settle();
  await shot(page, '4-stream-created');
  const stream = (await api('GET', '/streams/ui-orders', token)).id;

  step = 'create a topic';
  await page.goto(`${base}/ui/dashboard/streams/${stream}`, { waitUntil: 'networkidle0', timeout: WAIT });
  await clickButton(page, 'Add Topic');
  await page.waitForSelector('input[name="topicName"]', { timeout: WAIT });
  await page.type('input[name="topicName"]', 'ui-events');
  const partitions = await page.$('input[name="partitionsCount"]');
  await partitions.click({ clickCount: 3 });
  await partitions.type('1');
  await clickButton(page, 'Create');
  await waitForText(page, 'ui-events');
  await settle();
  await shot(page, '5-topic-created');
  const topic = (await api('GET', '/streams/ui-orders/topics/ui-events', token)).id;

  step = 'see a message in the message browser';
  await api('POST', `/streams/${stream}/topics/${topic}/messages`, token, {
    partitioning: { kind: 'partition_id', value: 'AAAAAA==' },
    messages: [{ payload: Buffer.from('hello from vireo').toString('base64') }],
  });
  await page.goto(`${base}/ui/dashboard/streams/${stream}/topics/${topic}/partitions/0/messages`, {
    waitUntil: 'networkidle0',
    timeout: WAIT,
  });
  // The browser lists a payload as its base64; opening the message decodes it.
  const encoded = Buffer.from('hello from vireo').toString('base64');
  await waitForText(page, encoded);
  await shot(page, '6-message-browser');
  step = 'open the message';
  await page.click('[aria-roledescription="Display message details"]');
  await clickButton(page, 'Decode');
  await waitForText(page, 'hello from vireo');
  await shot(page, '7-message-opened');
  console.log('PASS');
  for (const path of taken) console.log(path);
} catch (error) {
  console.log(`FAIL at "${step}": ${error.message}`);
  const pages = await browser.pages();
  if (pages.length > 0) await shot(pages[pages.length - 1], 'failed').catch(() => {});
  for (const path of taken) console.log(path);
  process.exitCode = 1;
} finally {
  await browser.close();
}
