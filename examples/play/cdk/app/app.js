// A small CDK app for `cfn-once play` (docs/play.md, "A CDK app, as synthesized").
// `make cdk-synth` installs the pinned aws-cdk-lib and runs `cdk synth` twice into
// examples/play/cdk/: CdkPlayStack.template.json (generation 1) and, with the context
// greeting=v2, CdkPlayStack-v2.template.json (an update that changes one property), plus
// CdkProviderStack (a parent and a nested stack holding a Provider framework), played as a
// nested stack (docs/play.md, "Nested stacks").
//
// CdkPlayStack's custom resource is typed Custom::Echo, which `cfn-once local` serves, and
// its ServiceToken is the stack parameter ServiceToken: cfn-once play gives that parameter
// the local ServiceToken topic's ARN when it is not set with --parameter.
const cdk = require('aws-cdk-lib');
const cr = require('aws-cdk-lib/custom-resources');
const lambda = require('aws-cdk-lib/aws-lambda');

class CdkPlayStack extends cdk.Stack {
  constructor(scope, id, props) {
    super(scope, id, props);
    const greeting = this.node.tryGetContext('greeting') || 'v1';
    const token = new cdk.CfnParameter(this, 'ServiceToken', {
      type: 'String',
      description: "The ServiceToken topic's ARN; cfn-once play fills in the local one",
    });
    const tier = new cdk.CfnParameter(this, 'Tier', {
      type: 'String',
      default: 'standard',
      allowedValues: ['standard', 'premium'],
    });
    new cdk.CfnRule(this, 'PremiumOnlyInUsEast', {
      ruleCondition: cdk.Fn.conditionEquals(tier.valueAsString, 'premium'),
      assertions: [{
        assert: cdk.Fn.conditionContains(['us-east-1', 'us-east-2'], cdk.Aws.REGION),
        assertDescription: 'The premium tier is offered in us-east-1 and us-east-2 only',
      }],
    });
    const sizes = new cdk.CfnMapping(this, 'SizeByRegion', {
      mapping: {
        'us-east-1': { Size: 'large' },
        'us-east-2': { Size: 'medium' },
        'eu-west-1': { Size: 'small' },
      },
      lazy: false,
    });
    const greeter = new cdk.CustomResource(this, 'Greeter', {
      serviceToken: token.valueAsString,
      resourceType: 'Custom::Echo',
      serviceTimeout: cdk.Duration.seconds(60),
      properties: {
        Greeting: greeting,
        Tier: tier.valueAsString,
        Size: sizes.findInMap(cdk.Aws.REGION, 'Size'),
        Zone: cdk.Fn.select(0, cdk.Fn.getAzs()),
        Subnets: cdk.Fn.cidr('10.0.0.0/16', 2, '8'),
        Banner: cdk.Fn.base64(`hello from ${cdk.Aws.STACK_NAME}`),
      },
    });
    new cdk.CfnOutput(this, 'GreetingOut', { value: greeter.getAttString('Greeting') });
    new cdk.CfnOutput(this, 'SizeOut', { value: greeter.getAttString('Size') });
  }
}

// The Provider framework's usual shape: the provider in a nested stack, the custom resource in
// the parent, its ServiceToken an output of the nested stack.
class ProviderNestedStack extends cdk.NestedStack {
  constructor(scope, id, props) {
    super(scope, id, props);
    const onEvent = new lambda.Function(this, 'OnEvent', {
      runtime: lambda.Runtime.NODEJS_20_X,
      handler: 'index.handler',
      code: lambda.Code.fromInline(
        "exports.handler = async (event) => ({ PhysicalResourceId: 'greeting', Data: { Text: 'hello' } });",
      ),
    });
    this.provider = new cr.Provider(this, 'Provider', { onEventHandler: onEvent });
  }
}

class CdkProviderStack extends cdk.Stack {
  constructor(scope, id, props) {
    super(scope, id, props);
    const nested = new ProviderNestedStack(this, 'ProviderStack');
    const greeting = new cdk.CustomResource(this, 'Greeting', {
      serviceToken: nested.provider.serviceToken,
      properties: { Name: 'world' },
    });
    new cdk.CfnOutput(this, 'Text', { value: greeting.getAttString('Text') });
  }
}

const app = new cdk.App();
new CdkPlayStack(app, 'CdkPlayStack');
new CdkProviderStack(app, 'CdkProviderStack');
app.synth();
