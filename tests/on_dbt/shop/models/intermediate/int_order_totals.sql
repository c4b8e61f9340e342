-- Each customer's orders that were not returned: inlined into the marts that read it.
{{ config(materialized='ephemeral') }}

select
    customer_id,
    count(*) as orders,
    sum(amount) as revenue,
    max(order_date) as last_order
from {{ ref('stg_orders') }}
where status != 'returned'
group by customer_id
