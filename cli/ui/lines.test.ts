// The extension line printed before `devop: ready` for an apiservice/ target: APIService, Service, pods, node
// connections and the Available condition (its message when it is not True).
import { describe, expect, it } from 'vitest';
import type { ExtensionState } from '../reporter.js';
import { formatExtension } from './lines.js';

const extension: ExtensionState = {
  kind: 'apiservice',
  name: 'v1alpha.farm.example.com',
  service: 'default/farm-operator',
  pods: 2,
  available: { status: 'True', reason: 'Passed', message: 'all checks passed' },
  stealsNodeConnections: false,
};

describe('extension line', () => {
  it('names the APIService, its Service, the pods and Available (without the message when True)', () => {
    expect(formatExtension(extension)).toBe(
      'apiservice v1alpha.farm.example.com → service default/farm-operator, 2 pods, Available=True (Passed)',
    );
  });

  it("says when the node's connections are taken, and why it is not Available", () => {
    const down: ExtensionState = {
      ...extension,
      pods: 1,
      stealsNodeConnections: true,
      available: { status: 'False', reason: 'FailedDiscoveryCheck', message: 'failing or missing response' },
    };
    expect(formatExtension(down)).toBe(
      "apiservice v1alpha.farm.example.com → service default/farm-operator, 1 pod, the node's connections taken " +
        "(the API server's), Available=False (FailedDiscoveryCheck): failing or missing response",
    );
    expect(formatExtension({ ...extension, available: { status: 'Unknown' } })).toMatch(/, Available=Unknown$/);
  });
});
