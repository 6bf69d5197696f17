import fs from 'node:fs/promises';
import path from 'node:path';
import { StackError } from './errors.ts';
import { findExecutable, requireExecutable } from './prerequisites.ts';
import { run } from './process.ts';

/**
 * The quorum's leader through the Java admin client (kafkajs has no DescribeQuorum, and MetadataQuorumCommand lives
 * in kafka-tools, which the stack does not download): a ten-line program compiled once per home with javac. It
 * asks the controllers themselves (bootstrap.controllers): a broker forwards the request to the controller it last
 * knew, and while that one is stopped brokers kept failing it for ~40 s after the quorum had elected another.
 */
export async function quorumLeader(libs: string, home: string, controllers: string): Promise<number> {
  const dir = path.join(home, 'quorum-leader');
  const java = await requireExecutable('java');
  const classpath = `${libs}/*${path.delimiter}${dir}`;
  if (
    !(await fs
      .access(path.join(dir, 'QuorumLeader.class'))
      .then(() => true)
      .catch(() => false))
  ) {
    await fs.mkdir(dir, { recursive: true });
    await fs.writeFile(path.join(dir, 'QuorumLeader.java'), QUORUM_LEADER_JAVA);
    await fs.writeFile(path.join(dir, 'log4j.properties'), 'log4j.rootLogger=OFF\n');
    const javac = await findExecutable('javac');
    if (!javac)
      throw new StackError(
        'prerequisite_missing',
        'javac not found (controllerLeader compiles a small admin client): apt-get install -y openjdk-17-jdk-headless',
      );
    await run(javac, ['-cp', `${libs}/*`, '-d', dir, path.join(dir, 'QuorumLeader.java')], { timeoutMs: 60_000 });
  }
  const log4j = `-Dlog4j.configuration=file:${path.join(dir, 'log4j.properties')}`;
  const { stdout } = await run(
    java,
    ['-XX:TieredStopAtLevel=1', log4j, '-cp', classpath, 'QuorumLeader', controllers],
    {
      timeoutMs: 30_000,
    },
  );
  const id = Number(stdout.trim().split('\n').at(-1));
  if (!Number.isInteger(id)) throw new Error(`describeMetadataQuorum printed no leader id: ${stdout.trim()}`);
  return id;
}

const QUORUM_LEADER_JAVA = `import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;

/** Prints the metadata quorum's leader id (the active controller), asked of the controllers in args[0]. */
public class QuorumLeader {
  public static void main(String[] args) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.controllers", args[0]);
    p.put("request.timeout.ms", "3000");
    p.put("default.api.timeout.ms", "4000");
    try (Admin admin = Admin.create(p)) {
      System.out.println(admin.describeMetadataQuorum().quorumInfo().get().leaderId());
    }
  }
}
`;
