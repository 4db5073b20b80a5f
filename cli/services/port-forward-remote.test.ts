// -R specs as users write them (ssh's [REMOTE:]HOST:PORT, mirrord's PORT and REMOTE:LOCAL) and the one line a bad one
// gets; the 502 a client gets when nothing listens locally.
import { describe, expect, it } from 'vitest';
import { isUserError } from '../../shared/errors.js';
import { nothingListensAnswer, parseRemoteForward, parseRemoteForwards } from './port-forward-remote.js';

describe('parseRemoteForward', () => {
  it.each([
    ['8080:localhost:3000', { remotePort: 8080, host: 'localhost', localPort: 3000 }],
    ['localhost:3000', { remotePort: 3000, host: 'localhost', localPort: 3000 }],
    ['3000', { remotePort: 3000, host: '127.0.0.1', localPort: 3000 }],
    ['8080:3000', { remotePort: 8080, host: '127.0.0.1', localPort: 3000 }],
    ['80:[::1]:8080', { remotePort: 80, host: '::1', localPort: 8080 }],
    ['9090:10.0.0.5:9000', { remotePort: 9090, host: '10.0.0.5', localPort: 9000 }],
  ])('reads %s', (spec, expected) => {
    // Given a spec as a user writes it, When it is parsed, Then the pod port goes to the local address
    expect(parseRemoteForward(spec)).toEqual({ ...expected, spec });
  });

  it.each(['notaport', '0', '70000', '8080:localhost:0', '8080:', ':3000', 'a:b:c:d', '99999:localhost:80'])(
    'refuses %s in one line naming the fix',
    (spec) => {
      // Given a bad spec, When it is parsed, Then it is a UserError whose fix shows the syntax
      let caught: unknown;
      try {
        parseRemoteForward(spec);
      } catch (err) {
        caught = err;
      }
      expect(isUserError(caught), String(caught)).toBe(true);
      const err = caught as Error & { hint?: string };
      expect(err.message).toMatch(new RegExp(`^-R ${spec.replace(/[[\]]/g, '\\$&')}: `));
      expect(err.message).not.toContain('\n');
    },
  );

  it('names the devop.json key when the spec comes from the file, and refuses a pod port given twice', () => {
    expect(() => parseRemoteForward('x', 'devop.json: portForward.remote')).toThrow(
      /^devop.json: portForward.remote x:/,
    );
    expect(() => parseRemoteForwards(['3000', '3000:localhost:4000'])).toThrow(/pod port 3000 is given twice/);
  });
});

describe('nothingListensAnswer', () => {
  it('is a complete HTTP/1.1 502 whose body names the local address and the fix', () => {
    const answer = nothingListensAnswer(parseRemoteForward('8080:localhost:3000'), 'ECONNREFUSED').toString();
    const [head, body] = answer.split('\r\n\r\n');
    expect(head).toMatch(/^HTTP\/1\.1 502 Bad Gateway\r\n/);
    expect(head).toContain(`content-length: ${Buffer.byteLength(body)}`);
    expect(body).toContain('nothing listens on localhost:3000 (ECONNREFUSED)');
    expect(body).toContain('— fix: start the local server there');
  });
});
